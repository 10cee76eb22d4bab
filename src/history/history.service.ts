import { InjectQueue } from '@nestjs/bull';
import { Inject, Injectable, Logger } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { Queue } from 'bull';
import { DataSource } from 'typeorm';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { StatementPipeline } from '../database/statement-pipeline.js';
import { GENERATION_QUEUE } from '../generation/generation.queue.js';
import { INPUT_STORE, MEDIA_STORE } from '../media/media.js';
import type { ObjectStore } from '../media/object-store.js';
import { HistoryItem, inputKeysOf, type StoredInput } from './history-item.entity.js';
import { type HistoryListRow, type HistoryQuery, historyItemSql, historyListSql } from './history.sql.js';
import { HistoryItemDto, type HistoryPageDto } from './history.dto.js';

export type { HistoryQuery };

/** A user's own history; another user's item is answered exactly like a missing one. */
@Injectable()
export class HistoryService {
  private readonly logger = new Logger(HistoryService.name);

  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    @InjectQueue(GENERATION_QUEUE) private readonly queue: Queue,
    @Inject(INPUT_STORE) private readonly inputs: ObjectStore,
    @Inject(MEDIA_STORE) private readonly media: ObjectStore,
    private readonly config: AppConfig,
    private readonly statements: StatementPipeline,
  ) {}

  private get items() {
    return this.dataSource.getRepository(HistoryItem);
  }

  async get(userId: string, id: string): Promise<HistoryItemDto> {
    const [item] = await this.statements.query<HistoryListRow>(historyItemSql(userId, id));
    if (!item) throw notFound();
    return HistoryItemDto.from(item, this.config.mediaPublicBaseUrl);
  }

  /** Newest first, ties broken by id, so pages neither repeat nor skip items. */
  async list(userId: string, query: HistoryQuery): Promise<HistoryPageDto> {
    const sql = historyListSql(userId, query);
    const [items, [{ total }]] = (await Promise.all([
      this.dataSource.query(sql.page.text, sql.page.values),
      this.dataSource.query(sql.count.text, sql.count.values),
    ])) as [HistoryListRow[], [{ total: number }]];
    return {
      items: items.map((item) => HistoryItemDto.from(item, this.config.mediaPublicBaseUrl)),
      page: query.page,
      limit: query.limit,
      total,
      total_pages: Math.ceil(total / query.limit),
    };
  }

  async setFeedback(userId: string, id: string, like: boolean | null): Promise<HistoryItemDto> {
    const [rows] = (await this.dataSource.query(
      `UPDATE history_items SET "like" = $3, updated_at = now()
        WHERE id = $1 AND user_id = $2 AND status = 'complete' RETURNING id`,
      [id, userId, like],
    )) as [unknown[], number];
    if (rows.length === 0) {
      const item = await this.items.findOneBy({ id, userId });
      if (!item) throw notFound();
      throw new DomainError('not_complete', `Feedback is taken on complete items; this one is ${item.status}.`);
    }
    return this.get(userId, id);
  }

  /**
   * The row goes first, so the item is gone for the client at once; a queued job is dropped, and a
   * running one finds no row when it finishes and throws its result away.
   */
  async delete(userId: string, id: string): Promise<void> {
    const [rows] = (await this.dataSource.query(
      'DELETE FROM history_items WHERE id = $1 AND user_id = $2 RETURNING inputs',
      [id, userId],
    )) as [{ inputs: Record<string, StoredInput> }[], number];
    if (rows.length === 0) throw notFound();
    try {
      await (await this.queue.getJob(id))?.remove();
    } catch (error) {
      // A job a worker holds cannot be removed; that worker discards its result itself.
      this.logger.debug({ err: error, id }, 'job not removed from the queue');
    }
    await Promise.all([this.inputs.delete(inputKeysOf(rows[0].inputs)), this.media.deleteFolder(id)]);
  }
}

function notFound(): DomainError {
  return new DomainError('not_found', 'No such history item.');
}
