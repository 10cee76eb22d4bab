import { Injectable } from '@nestjs/common';
import { DomainError } from '../common/problem.js';
import { type HistoryQuery, HistoryRepository } from '../jobs/history.repository.js';
import { JobLifecycle } from '../jobs/job-lifecycle.js';
import { ItemViews } from '../jobs/item-views.js';
import { JobWaits } from '../jobs/job-waits.js';
import type { HistoryItemDto } from '../jobs/history-item.dto.js';
import type { HistoryPageDto } from './history.dto.js';

/** A user's own history; another user's item is answered exactly like a missing one. */
@Injectable()
export class HistoryService {
  constructor(
    private readonly items: HistoryRepository,
    private readonly lifecycle: JobLifecycle,
    private readonly waits: JobWaits,
    private readonly views: ItemViews,
  ) {}

  /** With `waitSeconds`, answers as soon as the item is final, or after that long with it still pending. */
  async get(userId: string, id: string, waitSeconds?: number): Promise<HistoryItemDto> {
    const item = waitSeconds
      ? await this.waits.untilFinal(userId, id, waitSeconds * 1000)
      : await this.items.findOwned(userId, id);
    if (!item) throw notFound();
    return this.views.one(item);
  }

  /** Newest first, ties broken by id, so pages neither repeat nor skip items. */
  async list(userId: string, query: HistoryQuery): Promise<HistoryPageDto> {
    const { rows, total } = await this.items.list(userId, query);
    return {
      items: await this.views.many(rows),
      page: query.page,
      limit: query.limit,
      total,
      total_pages: Math.ceil(total / query.limit),
    };
  }

  async setFeedback(userId: string, id: string, like: boolean | null): Promise<HistoryItemDto> {
    const outcome = await this.items.setLike(userId, id, like);
    if (outcome === undefined) throw notFound();
    if (outcome !== 'updated') {
      throw new DomainError('not_complete', `Feedback is taken on complete items; this one is ${outcome}.`);
    }
    return this.get(userId, id);
  }

  async cancel(userId: string, id: string): Promise<HistoryItemDto> {
    const outcome = await this.lifecycle.cancel(userId, id);
    if (outcome === undefined) throw notFound();
    if (outcome !== 'canceled') {
      throw new DomainError('not_pending', `Only pending jobs can be canceled; this one is ${outcome}.`);
    }
    return this.get(userId, id);
  }

  async delete(userId: string, id: string): Promise<void> {
    if (!(await this.lifecycle.delete(userId, id))) throw notFound();
  }
}

function notFound(): DomainError {
  return new DomainError('not_found', 'No such history item.');
}
