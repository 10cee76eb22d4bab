import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { AppConfig } from '../config/config.js';
import type { RunRecord } from '../engines/index.js';
import { REDIS } from '../redis/redis.module.js';

/**
 * The id of the run a remote engine started for a job (a Replicate prediction, a ComfyUI prompt), in Redis, so that
 * another attempt of the job (in any worker) resumes it rather than running the model again. Kept as long as a job
 * may live.
 */
@Injectable()
export class EngineRuns {
  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
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
}

/** Where the id of the remote run of a job is kept. */
export function engineRunKey(jobId: string): string {
  return `engine-run:${jobId}`;
}
