import { Inject, Injectable, Logger } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { AppConfig } from '../config/config.js';
import { EngineRegistry, type RunRecord } from '../engines/index.js';
import { REDIS } from '../redis/redis.module.js';
import { EngineSlotQueue } from './engine-slot-queue.js';

/** A job's records of its model runs, one per run. */
export interface JobRuns {
  /** The record of the job's run `index`: 0 for the first (the only one of a route that is not `repeat`). */
  run(index: number): RunRecord;
  /** Forgets every run of the job: its outcome is committed. */
  forget(): Promise<void>;
}

/** A job's run as kept: the server (the routing file's name) whose engine started it, and what that engine recorded. */
interface StoredRun {
  /** Undefined for a record kept before runs were kept with their server's name: the job's route's server, then. */
  engine: string | undefined;
  run: string;
}

/**
 * The id of the run a remote engine started for a job (a Replicate prediction, a ComfyUI prompt), in Redis with the
 * name of its server, so that another attempt of the job (in any worker) resumes it rather than running the model
 * again, and whoever ends the job stops it on that server even once the routing file sends the job elsewhere. Kept as
 * long as a job may live.
 */
@Injectable()
export class EngineRuns {
  private readonly logger = new Logger(EngineRuns.name);

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
    private readonly engines: EngineRegistry,
    private readonly slots: EngineSlotQueue,
  ) {}

  /**
   * The job's run records as the engine of server `engine` sees them: a run another server's engine started is none.
   * A `repeat` route runs the model once for each result, each run with a record of its own, so that a later attempt
   * resumes every run an earlier one started or finished instead of paying for it again.
   */
  for(jobId: string, engine: string): JobRuns {
    return {
      run: (index) => this.record(jobId, engine, index),
      forget: async () => {
        await this.redis.del(engineRunKey(jobId), laterRunsKey(jobId));
      },
    };
  }

  /** The first run's record is a key of its own, as before `repeat` routes; the later runs' are fields of one hash. */
  private record(jobId: string, engine: string, index: number): RunRecord {
    const first = index === 0;
    const key = first ? engineRunKey(jobId) : laterRunsKey(jobId);
    const field = String(index);
    return {
      recall: async () => {
        const stored = decodeStoredRun(first ? await this.redis.get(key) : await this.redis.hget(key, field));
        return stored && (stored.engine ?? engine) === engine ? stored.run : undefined;
      },
      remember: async (run) => {
        const value = JSON.stringify({ engine, run } satisfies StoredRun);
        if (first) {
          await this.redis.set(key, value, 'PX', this.config.jobDeadlineMs);
          return;
        }
        const results = await this.redis.multi().hset(key, field, value).pexpire(key, this.config.jobDeadlineMs).exec();
        const error = results?.find(([failure]) => failure)?.[0];
        if (error) throw error;
      },
      forget: async () => {
        await (first ? this.redis.del(key) : this.redis.hdel(key, field));
      },
    };
  }

  /**
   * Stops the run recorded for a job that no attempt will follow, on the server that runs it: the job ended between
   * attempts (canceled or deleted after a rollout left its run going, or in a retry's backoff while the model went on;
   * or deleted as a worker took it), or, with `unlessOn`, the job's attempt is about to run on server `unlessOn` while
   * its run is on another (a rollout routed the job elsewhere). The model server would otherwise spend its GPU on a
   * result nobody takes. The job goes on, or has ended, whatever the server says: a failure is logged, not raised.
   */
  async abandon(job: { id: string; tool: string; generationType: string }, unlessOn?: string): Promise<void> {
    try {
      const [first, later] = await Promise.all([
        this.redis.get(engineRunKey(job.id)),
        this.redis.hgetall(laterRunsKey(job.id)),
      ]);
      const recorded = [
        ...(first === null ? [] : [{ index: 0, stored: first }]),
        ...Object.entries(later).map(([field, stored]) => ({ index: Number(field), stored })),
      ];
      for (const { index, stored } of recorded) await this.abandonRun(job, index, decodeStoredRun(stored)!, unlessOn);
    } catch (error) {
      this.logger.warn({ id: job.id, err: (error as Error).message }, 'could not stop the run of a job');
    }
  }

  private async abandonRun(
    job: { id: string; tool: string; generationType: string },
    index: number,
    stored: StoredRun,
    unlessOn: string | undefined,
  ): Promise<void> {
    const engine = stored.engine ?? this.engines.route(job.tool, job.generationType).engineName;
    if (engine === unlessOn) return;
    const record = this.record(job.id, engine, index);
    const server = this.engines.server(engine);
    if (!server) {
      await record.forget();
      this.logger.warn(
        { id: job.id, engine },
        'the run of a job left on an engine the routing file no longer names cannot be stopped',
      );
      return;
    }
    if (!server.served.abandon) return;
    await server.served.abandon(stored.run);
    await record.forget();
    // A run left at a rollout keeps its job's slot for the next attempt, which will not come: the server is free now.
    if (server.concurrency !== undefined) await this.slots.forget([job.id], engine);
    this.logger.log(
      { id: job.id, engine },
      unlessOn === undefined
        ? 'asked the model server to stop the run of a job that ended between attempts'
        : `asked the model server to stop the run of a job now routed to ${unlessOn}`,
    );
  }
}

/** A stored run: `{ engine, run }` as JSON, or, kept before that, the engine's record alone. */
function decodeStoredRun(stored: string | null): StoredRun | undefined {
  if (stored === null) return undefined;
  try {
    const parsed = JSON.parse(stored) as Partial<StoredRun> | null;
    if (typeof parsed?.engine === 'string' && typeof parsed.run === 'string') {
      return { engine: parsed.engine, run: parsed.run };
    }
  } catch {
    // An engine's own record that is not JSON (a Cog marker).
  }
  return { engine: undefined, run: stored };
}

/** Where the id of the remote run of a job is kept: of its first run, the only one of a route that is not `repeat`. */
export function engineRunKey(jobId: string): string {
  return `engine-run:${jobId}`;
}

/** Where the ids of a `repeat` route's later runs of a job are kept: a hash by the run's index (1, 2, ...). */
export function laterRunsKey(jobId: string): string {
  return `engine-run:${jobId}:later`;
}
