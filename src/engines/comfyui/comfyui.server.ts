import type { ComfyRoute, ComfyServerSetting } from '../../config/engine-settings.js';
import type { Engine, EngineLimits, EngineServer } from '../engine.js';

/** A ComfyUI server. (Placeholder while the kind is built.) */
export class ComfyServer implements EngineServer<ComfyRoute> {
  constructor(setting: ComfyServerSetting, _limits: EngineLimits) {
    throw new Error(`engines.${setting.name}: the comfyui kind is not built yet`);
  }

  engineFor(_route: ComfyRoute): Engine {
    throw new Error('not built');
  }

  probe(): Promise<boolean> {
    return Promise.resolve(false);
  }

  async close(): Promise<void> {}
}
