import { Injectable } from '@nestjs/common';
import { AppConfig } from '../../config/config.js';
import { CogEngine } from './cog/cog.engine.js';
import type { Engine } from './engine.js';
import { LocalEngine } from './local/index.js';

/** Largest image a remote engine may send back: the upload limit's pixels at four bytes each. */
const BYTES_PER_PIXEL = 4;

/** Which engine runs which tool, as configured by `ENGINE_<TOOL>` (`local` unless set). */
@Injectable()
export class EngineRegistry {
  private readonly engines = new Map<string, Engine>();

  constructor(config: AppConfig) {
    const local = new LocalEngine({ limitInputPixels: config.imageMaxPixels });
    for (const [tool, setting] of Object.entries(config.engines)) {
      this.engines.set(
        tool,
        setting.kind === 'local'
          ? local
          : new CogEngine(setting.url, {
              timeoutMs: config.engineTimeoutMs,
              maxOutputBytes: config.imageMaxPixels * BYTES_PER_PIXEL,
            }),
      );
    }
  }

  for(tool: string): Engine {
    const engine = this.engines.get(tool);
    if (!engine) throw new Error(`no engine is configured for tool "${tool}"`);
    return engine;
  }
}
