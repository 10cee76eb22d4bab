import { Injectable } from '@nestjs/common';
import type { components } from '../generated/openapi.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { UserLimits } from '../users/user-limits.js';
import { CreationRateLimit } from './limits.js';

type Usage = components['schemas']['Usage'];
type ToolUsage = components['schemas']['ToolUsage'];

/** `GET /user/usage`: a user's limits, what they use of them now, and their jobs this month. */
@Injectable()
export class UsageService {
  constructor(
    private readonly limits: UserLimits,
    private readonly rateLimit: CreationRateLimit,
    private readonly items: HistoryRepository,
  ) {}

  /** A handful of reads, whatever the size of the user's history: the counts are kept by triggers. */
  async of(userId: string, now = new Date()): Promise<Usage> {
    const periodStart = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
    const [limits, budget, pending, tools] = await Promise.all([
      this.limits.of(userId),
      this.rateLimit.standing(userId, now.getTime()),
      this.items.pendingCount(userId),
      this.items.monthUsage(userId, periodStart),
    ]);
    const byTool: Record<string, ToolUsage> = {};
    for (const { tool, jobs, complete, error } of tools) byTool[tool] = { jobs, complete, error };
    const total = (field: keyof ToolUsage) => tools.reduce((sum, row) => sum + row[field], 0);
    return {
      limits: {
        max_pending: limits.maxPending,
        creations_per_minute: limits.creationsPerMinute,
        concurrent_uploads: limits.concurrentUploads,
        event_streams: limits.eventStreams,
        held_requests: limits.heldRequests,
      },
      now: { pending, creations_last_minute: budget.used },
      month: {
        period_start: periodStart.toISOString(),
        jobs: total('jobs'),
        complete: total('complete'),
        error: total('error'),
        by_tool: byTool,
      },
    };
  }
}
