import type { ReplicateRoute, ReplicateServerSetting } from '../../config/engine-settings.js';
import type { Engine, EngineLimits, EngineServer } from '../engine.js';

/** Replicate's hosted API. (Placeholder while the kind is built.) */
export class ReplicateServer implements EngineServer<ReplicateRoute> {
  constructor(setting: ReplicateServerSetting, _limits: EngineLimits) {
    throw new Error(`engines.${setting.name}: the replicate kind is not built yet`);
  }

  engineFor(_route: ReplicateRoute): Engine {
    throw new Error('not built');
  }

  probe(): Promise<boolean> {
    return Promise.resolve(false);
  }

  async close(): Promise<void> {}
}
