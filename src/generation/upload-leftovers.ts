import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Inject, Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { INPUT_STORE, itemIdOfInputKey } from '../media/media.js';
import type { ObjectStore } from '../media/object-store.js';

/**
 * Age past which a file in UPLOAD_TMP_DIR belongs to no upload in progress: Node ends a request after five minutes
 * (the HTTP server's `requestTimeout`), and an upload's file is moved or removed as its request ends. The same age
 * tells a stored input whose item is not written yet (its request is still running) from one whose never will be.
 */
const LEFTOVER_AFTER_MS = 10 * 60_000;
const SWEEP_INTERVAL_MS = 10 * 60_000;
/** Items looked up per statement. */
const LOOKUP_BATCH = 1000;

/**
 * Removes what uploads left behind when their process could not: files in UPLOAD_TMP_DIR (a process killed or
 * crashed mid-request, or cut off at shutdown), and stored inputs of no pending job (a process killed between storing
 * a job's inputs and writing its item, or a job whose end could not remove them). Those files are people's photos,
 * which no job holds: at boot, then every ten minutes, those older than any upload in progress go. Processes sharing
 * the folder or the store may each sweep it.
 */
@Injectable()
export class UploadLeftovers implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger(UploadLeftovers.name);
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly config: AppConfig,
    private readonly items: HistoryRepository,
    @Inject(INPUT_STORE) private readonly inputs: ObjectStore,
  ) {}

  onApplicationBootstrap(): void {
    void this.sweep();
    this.timer = setInterval(() => void this.sweep(), SWEEP_INTERVAL_MS).unref();
  }

  onApplicationShutdown(): void {
    clearInterval(this.timer);
  }

  /** Resolves how many files were removed; a failure is logged, and the next sweep tries again. */
  async sweep(): Promise<{ uploads: number; inputs: number }> {
    const cutoff = Date.now() - LEFTOVER_AFTER_MS;
    const uploads = await this.sweepUploadFolder(cutoff).catch((error: unknown) => {
      this.logger.warn({ err: error }, 'could not sweep the upload folder');
      return 0;
    });
    if (uploads > 0) this.logger.log({ removed: uploads }, 'removed files that uploads left behind');
    const inputs = await this.sweepInputStore(cutoff).catch((error: unknown) => {
      this.logger.warn({ err: error }, 'could not sweep the input store');
      return 0;
    });
    if (inputs > 0) this.logger.log({ removed: inputs }, 'removed stored inputs of no pending job');
    return { uploads, inputs };
  }

  private async sweepUploadFolder(cutoff: number): Promise<number> {
    const directory = this.config.uploadTmpDir;
    let removed = 0;
    for (const name of await readdir(directory)) {
      const path = join(directory, name);
      // Gone meanwhile (its request ended): nothing to do.
      const stats = await stat(path).catch(() => undefined);
      if (!stats?.isFile() || stats.mtimeMs > cutoff) continue;
      await rm(path, { force: true });
      removed++;
    }
    return removed;
  }

  /** The store holds the inputs of pending jobs only: a job's end removes them, and so does its item's delete. */
  private async sweepInputStore(cutoff: number): Promise<number> {
    const old: { key: string; itemId: string }[] = [];
    for await (const { key, writtenAt } of this.inputs.list()) {
      const itemId = itemIdOfInputKey(key);
      // Anything else in the store is not the service's to remove.
      if (itemId !== undefined && writtenAt.getTime() <= cutoff) old.push({ key, itemId });
    }
    let removed = 0;
    for (let start = 0; start < old.length; start += LOOKUP_BATCH) {
      const batch = old.slice(start, start + LOOKUP_BATCH);
      const pending = new Set(await this.items.pendingAmong(batch.map((input) => input.itemId)));
      const stray = batch.filter((input) => !pending.has(input.itemId)).map((input) => input.key);
      await this.inputs.delete(stray);
      removed += stray.length;
    }
    return removed;
  }
}
