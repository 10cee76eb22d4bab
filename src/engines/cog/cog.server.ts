import type { CogRoute, CogServerSetting } from '../../config/engine-settings.js';
import type { Engine, EngineLimits, EngineServer } from '../engine.js';
import { CogEngine } from './cog.engine.js';

/** A Cog container: one model, served at `setting.url`. (Being rewritten to ENGINES.md's `cog` kind.) */
export class CogServer implements EngineServer<CogRoute> {
  constructor(
    private readonly setting: CogServerSetting,
    private readonly limits: EngineLimits,
  ) {}

  engineFor(_route: CogRoute): Engine {
    return new CogEngine(this.setting.url, {
      timeoutMs: this.setting.timeoutMs,
      maxOutputBytes: this.limits.maxOutputBytes,
    });
  }

  async probe(): Promise<boolean> {
    return Promise.resolve(true);
  }

  async close(): Promise<void> {}
}
