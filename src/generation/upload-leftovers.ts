import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { AppConfig } from '../config/config.js';

/**
 * Age past which a file in UPLOAD_TMP_DIR belongs to no upload in progress: Node ends a request after five minutes
 * (the HTTP server's `requestTimeout`), and an upload's file is moved or removed as its request ends.
 */
const LEFTOVER_AFTER_MS = 10 * 60_000;
const SWEEP_INTERVAL_MS = 10 * 60_000;

/**
 * Removes what uploads left in UPLOAD_TMP_DIR when their process could not: killed or crashed mid-request, or cut off
 * at shutdown. Those files are people's photos, which no job holds: at boot, then every ten minutes, the files older
 * than any upload in progress go. Processes sharing the folder may each sweep it.
 */
@Injectable()
export class UploadLeftovers implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger(UploadLeftovers.name);
  private timer?: NodeJS.Timeout;

  constructor(private readonly config: AppConfig) {}

  onApplicationBootstrap(): void {
    void this.sweep();
    this.timer = setInterval(() => void this.sweep(), SWEEP_INTERVAL_MS).unref();
  }

  onApplicationShutdown(): void {
    clearInterval(this.timer);
  }

  /** Resolves how many files were removed; a failure is logged, and the next sweep tries again. */
  async sweep(): Promise<number> {
    const directory = this.config.uploadTmpDir;
    let removed = 0;
    try {
      const cutoff = Date.now() - LEFTOVER_AFTER_MS;
      for (const name of await readdir(directory)) {
        const path = join(directory, name);
        // Gone meanwhile (its request ended): nothing to do.
        const stats = await stat(path).catch(() => undefined);
        if (!stats?.isFile() || stats.mtimeMs > cutoff) continue;
        await rm(path, { force: true });
        removed++;
      }
    } catch (error) {
      this.logger.warn({ err: error }, 'could not sweep the upload folder');
    }
    if (removed > 0) this.logger.log({ removed }, 'removed files that uploads left behind');
    return removed;
  }
}
