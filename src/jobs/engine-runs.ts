import { Inject, Injectable, Logger } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { Semaphore } from 'redis-semaphore';
import { AppConfig } from '../config/config.js';
import { EngineRegistry, type RunRecord } from '../engines/index.js';
import { REDIS } from '../redis/redis.module.js';

/**
 * What each engine's slots semaphore (the worker's EngineSlots) is named after; redis-semaphore keeps it as a sorted
 * set at `semaphore:<name>`, the holders named by their job ids.
 */
export const ENGINE_SLOTS = 'engine-slots:';

/**
 * The id of the run a remote engine started for a job (a Replicate prediction, a ComfyUI prompt), in Redis, so that
 * another attempt of the job (in any worker) resumes it rather than running the model again. Kept as long as a job
 * may live.
 */
@Injectable()
export class EngineRuns {
  private readonly logger = new Logger(EngineRuns.name);

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
    private readonly engines: EngineRegistry,
  ) {}

  for(jobId: string): RunRecord {
    const key = engineRunKey(jobId);
    return {
      recall: async () => (await this.redis.get(key)) ?? undefined,
      remember: async (runId) => {
        await this.redis.set(key, runId, 'PX', this.config.jobDeadlineMs);
      },
      forget: async () => {
        await this.redis.del(key);
      },
    };
  }

  /**
   * Stops the run recorded for a job that ended where no worker follows its run: canceled or deleted between two
   * attempts (after a rollout left its run going, or in a retry's backoff while the model went on), or deleted as a
   * worker took it. No attempt follows that run any more, and the model server would otherwise spend its GPU on a
   * result nobody takes. The job has ended whatever the server says: a failure is logged, not raised.
   */
  async abandon(job: { id: string; tool: string; generationType: string }): Promise<void> {
    try {
      const route = this.engines.route(job.tool, job.generationType);
      if (!route.engine.abandon) return;
      const record = this.for(job.id);
      const runId = await record.recall();
      if (runId === undefined) return;
      await route.engine.abandon(runId);
      await record.forget();
      // A run left at a rollout keeps its job's slot for the next attempt, which will not come: the server is free now.
      if (route.concurrency !== undefined) {
        const options = { identifier: job.id, acquiredExternally: true } as const;
        await new Semaphore(this.redis, `${ENGINE_SLOTS}${route.engineName}`, route.concurrency, options).release();
      }
      this.logger.log(
        { id: job.id, engine: route.engineName },
        'asked the model server to stop the run of a job that ended between attempts',
      );
    } catch (error) {
      this.logger.warn({ id: job.id, err: (error as Error).message }, 'could not stop the run of an ended job');
    }
  }
}

/** Where the id of the remote run of a job is kept. */
export function engineRunKey(jobId: string): string {
  return `engine-run:${jobId}`;
}
