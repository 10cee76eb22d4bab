import { Inject, Injectable, Logger } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { AppConfig } from '../config/config.js';
import { EngineRegistry, type RunRecord } from '../engines/index.js';
import { REDIS } from '../redis/redis.module.js';
import { EngineSlotQueue } from './engine-slot-queue.js';

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

  /** The job's run record as the engine of server `engine` sees it: a run another server's engine started is none. */
  for(jobId: string, engine: string): RunRecord {
    const key = engineRunKey(jobId);
    return {
      recall: async () => {
        const stored = decodeStoredRun(await this.redis.get(key));
        return stored && (stored.engine ?? engine) === engine ? stored.run : undefined;
      },
      remember: async (run) => {
        await this.redis.set(key, JSON.stringify({ engine, run } satisfies StoredRun), 'PX', this.config.jobDeadlineMs);
      },
      forget: async () => {
        await this.redis.del(key);
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
    const key = engineRunKey(job.id);
    try {
      const stored = decodeStoredRun(await this.redis.get(key));
      if (!stored) return;
      const engine = stored.engine ?? this.engines.route(job.tool, job.generationType).engineName;
      if (engine === unlessOn) return;
      const server = this.engines.server(engine);
      if (!server) {
        await this.redis.del(key);
        this.logger.warn(
          { id: job.id, engine },
          'the run of a job left on an engine the routing file no longer names cannot be stopped',
        );
        return;
      }
      if (!server.served.abandon) return;
      await server.served.abandon(stored.run);
      await this.redis.del(key);
      // A run left at a rollout keeps its job's slot for the next attempt, which will not come: the server is free now.
      if (server.concurrency !== undefined) await this.slots.forget([job.id], engine);
      this.logger.log(
        { id: job.id, engine },
        unlessOn === undefined
          ? 'asked the model server to stop the run of a job that ended between attempts'
          : `asked the model server to stop the run of a job now routed to ${unlessOn}`,
      );
    } catch (error) {
      this.logger.warn({ id: job.id, err: (error as Error).message }, 'could not stop the run of a job');
    }
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

/** Where the id of the remote run of a job is kept. */
export function engineRunKey(jobId: string): string {
  return `engine-run:${jobId}`;
}
