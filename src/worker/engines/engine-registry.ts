import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { AppConfig } from '../../config/config.js';
import { CogEngine } from './cog/cog.engine.js';
import type { Engine } from './engine.js';
import { ThreadedLocalEngine } from './local/index.js';

/** Largest image a remote engine may send back: the upload limit's pixels at four bytes each. */
const BYTES_PER_PIXEL = 4;

/** Which engine runs which tool, as configured by `ENGINE_<TOOL>` (`local` unless set). */
@Injectable()
export class EngineRegistry implements OnApplicationShutdown {
  private readonly engines = new Map<string, Engine>();
  /** One thread per job the worker runs at once: every local job has one to itself. */
  private readonly local: ThreadedLocalEngine;

  constructor(config: AppConfig) {
    this.local = new ThreadedLocalEngine(config.workerConcurrency, config.imageMaxPixels);
    for (const [tool, setting] of Object.entries(config.engines)) {
      this.engines.set(
        tool,
        setting.kind === 'local'
          ? this.local
          : new CogEngine(setting.url, {
              timeoutMs: config.engineTimeoutMs,
              maxOutputBytes: config.imageMaxPixels * BYTES_PER_PIXEL,
            }),
      );
    }
  }

  /** After the processor's own shutdown, so running jobs have finished or were handed back to the queue. */
  async onApplicationShutdown(): Promise<void> {
    await this.local.close();
  }

  for(tool: string): Engine {
    const engine = this.engines.get(tool);
    if (!engine) throw new Error(`no engine is configured for tool "${tool}"`);
    return engine;
  }
}
