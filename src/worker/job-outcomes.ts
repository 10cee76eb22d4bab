import { Inject, Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { HistoryItem, type JobErrorCode } from '../history/history-item.entity.js';
import { INPUT_STORE, MEDIA_STORE } from '../media/media.js';
import type { ObjectStore } from '../media/object-store.js';

/**
 * The only writers of a job's final status. Each update is guarded by `status = 'pending'`, so of two
 * deliveries of one job, or a worker and the reconciler, exactly one decides the outcome.
 */
@Injectable()
export class JobOutcomes {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    @Inject(INPUT_STORE) private readonly inputs: ObjectStore,
    @Inject(MEDIA_STORE) private readonly media: ObjectStore,
  ) {}

  /** Marks the item complete once its outputs are written; throws the outputs away if it was deleted meanwhile. */
  async complete(id: string): Promise<void> {
    const [rows] = (await this.dataSource.query(
      `UPDATE history_items SET status = 'complete', completed_at = now(), updated_at = now()
        WHERE id = $1 AND status = 'pending' RETURNING id`,
      [id],
    )) as [unknown[], number];
    if (rows.length > 0) {
      // The inputs are people's photos: kept no longer than the job needs them.
      await this.inputs.deleteFolder(id);
      return;
    }
    const item = await this.dataSource.getRepository(HistoryItem).findOneBy({ id });
    if (item?.status !== 'complete') await this.media.deleteFolder(id);
  }

  /** `message` is what the client reads in `error.message`: plain words, nothing from inside the machine. */
  async fail(id: string, code: JobErrorCode, message: string): Promise<boolean> {
    const [rows] = (await this.dataSource.query(
      `UPDATE history_items SET status = 'error', error_code = $2, error_message = $3, updated_at = now()
        WHERE id = $1 AND status = 'pending' RETURNING id`,
      [id, code, message],
    )) as [unknown[], number];
    if (rows.length === 0) return false;
    await Promise.all([this.inputs.deleteFolder(id), this.media.deleteFolder(id)]);
    return true;
  }
}
