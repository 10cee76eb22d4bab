import { Injectable } from '@nestjs/common';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { type HistoryQuery, HistoryRepository } from '../jobs/history.repository.js';
import { JobLifecycle } from '../jobs/job-lifecycle.js';
import { HistoryItemDto, type HistoryPageDto } from './history.dto.js';

export type { HistoryQuery };

/** A user's own history; another user's item is answered exactly like a missing one. */
@Injectable()
export class HistoryService {
  constructor(
    private readonly items: HistoryRepository,
    private readonly lifecycle: JobLifecycle,
    private readonly config: AppConfig,
  ) {}

  async get(userId: string, id: string): Promise<HistoryItemDto> {
    const item = await this.items.findOwned(userId, id);
    if (!item) throw notFound();
    return HistoryItemDto.from(item, this.config.mediaPublicBaseUrl);
  }

  /** Newest first, ties broken by id, so pages neither repeat nor skip items. */
  async list(userId: string, query: HistoryQuery): Promise<HistoryPageDto> {
    const { rows, total } = await this.items.list(userId, query);
    return {
      items: rows.map((item) => HistoryItemDto.from(item, this.config.mediaPublicBaseUrl)),
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

  async delete(userId: string, id: string): Promise<void> {
    if (!(await this.lifecycle.delete(userId, id))) throw notFound();
  }
}

function notFound(): DomainError {
  return new DomainError('not_found', 'No such history item.');
}
