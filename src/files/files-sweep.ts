import { Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import { StoredFiles } from './stored-files.js';

/** Files removed per statement. */
const BATCH = 200;
/** The longest wait between sweeps, whatever FILE_TTL is. */
const MAX_INTERVAL_MS = 10 * 60_000;
/**
 * Bytes younger than this may belong to a file whose row is still being written (a `POST /files` in progress): the
 * sweep of stray bytes leaves them alone. Node ends a request after five minutes.
 */
const STRAY_AFTER_MS = 10 * 60_000;

/**
 * Removes stored files past FILE_TTL, with their bytes, and bytes no file names. Every API process sweeps every
 * FILE_TTL (at most every ten minutes): a file is gone for its owner at its `expires_at`, and its bytes within one
 * more sweep. Processes sweeping at once share the work: each expired row goes to one of them.
 */
@Injectable()
export class FilesSweep implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger(FilesSweep.name);
  private timer?: NodeJS.Timeout;
  private sweeping = false;

  constructor(
    private readonly config: AppConfig,
    private readonly files: StoredFiles,
  ) {}

  onApplicationBootstrap(): void {
    const interval = Math.min(this.config.fileTtlMs, MAX_INTERVAL_MS);
    this.timer = setInterval(() => void this.sweep(), interval).unref();
  }

  onApplicationShutdown(): void {
    clearInterval(this.timer);
  }

  /** Resolves how many files and stray objects went; a failure is logged, and the next sweep tries again. */
  async sweep(): Promise<{ expired: number; stray: number }> {
    if (this.sweeping) return { expired: 0, stray: 0 };
    this.sweeping = true;
    try {
      let expired = 0;
      let batch: number;
      do {
        batch = await this.files.removeSome(BATCH);
        expired += batch;
      } while (batch === BATCH);
      const stray = await this.files.removeStray(Date.now() - STRAY_AFTER_MS);
      if (expired + stray > 0) this.logger.log({ expired, stray }, 'removed expired stored files');
      return { expired, stray };
    } catch (error) {
      this.logger.warn({ err: error }, 'could not sweep the stored files');
      return { expired: 0, stray: 0 };
    } finally {
      this.sweeping = false;
    }
  }
}
