import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { inputKeysOf, type JobErrorCode, type StoredInput } from '../history/history-item.entity.js';
import { INPUT_STORE, MEDIA_STORE } from '../media/media.js';
import type { ObjectStore } from '../media/object-store.js';
import { Metrics } from '../metrics/metrics.js';

/** What a final update needs of the item: its tool to count the outcome, its inputs to delete them. */
interface FinishedItem {
  tool: string;
  inputs: Record<string, StoredInput>;
}

/**
 * The only writers of a job's final status. Each update is guarded by `status = 'pending'`, so of two
 * deliveries of one job, or a worker and the reconciler, exactly one decides the outcome, and counts it.
 */
@Injectable()
export class JobOutcomes {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    @Inject(INPUT_STORE) private readonly inputs: ObjectStore,
    @Inject(MEDIA_STORE) private readonly media: ObjectStore,
    private readonly metrics: Metrics,
  ) {}

  /**
   * Writes the outputs and marks the item complete while holding the item's row lock. A delete, the reconciler's
   * timeout or another delivery of the same job either waits for this to commit or finds the item gone or final
   * first, in which case nothing is written: a deleted item never gets media files (not even for a moment), and a
   * complete item's files are never rewritten by a late duplicate run. Resolves false when the result was dropped.
   */
  async complete(id: string, writeOutputs: () => Promise<void>): Promise<boolean> {
    const item = await this.dataSource.transaction(async (manager) => {
      const rows = (await manager.query(
        `SELECT tool, inputs FROM history_items WHERE id = $1 AND status = 'pending' FOR UPDATE`,
        [id],
      )) as FinishedItem[];
      if (rows.length === 0) return undefined;
      // A run killed while writing (between a temporary file and its rename) left partial files behind; under
      // the lock no other run writes here, so this one starts from an empty folder.
      await this.media.deleteFolder(id);
      await writeOutputs();
      await manager.query(
        `UPDATE history_items SET status = 'complete', completed_at = now(), updated_at = now() WHERE id = $1`,
        [id],
      );
      return rows[0];
    });
    if (item === undefined) return false;
    this.metrics.countJobOutcome(item.tool, 'complete');
    // The inputs are people's photos: kept no longer than the job needs them.
    await this.inputs.delete(inputKeysOf(item.inputs));
    return true;
  }

  /** `message` is what the client reads in `error.message`: plain words, nothing from inside the machine. */
  async fail(id: string, code: JobErrorCode, message: string): Promise<boolean> {
    const [rows] = (await this.dataSource.query(
      `UPDATE history_items
          SET status = 'error', error_code = $2, error_message = $3, completed_at = now(), updated_at = now()
        WHERE id = $1 AND status = 'pending' RETURNING tool, inputs`,
      [id, code, message],
    )) as [FinishedItem[], number];
    if (rows.length === 0) return false;
    this.metrics.countJobOutcome(rows[0].tool, code);
    await Promise.all([this.inputs.delete(inputKeysOf(rows[0].inputs)), this.media.deleteFolder(id)]);
    return true;
  }
}
