import { Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import { outsideTraces } from '../common/tracing.js';
import { AppConfig } from '../config/config.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { JobEvents } from '../jobs/job-events.js';

/** One run of a job this worker follows: aborted once its item is no longer pending. */
interface Followed {
  id: string;
  ended: AbortController;
}

/**
 * Tells each job this worker runs when its item ended elsewhere: canceled or deleted by an API request, timed out by
 * the reconciler, in any process. Its engine then stops and tells its model server.
 *
 * The change's event arrives at once, but pub/sub delivers at most once: a message lost (the fan-out's connection cut,
 * Redis restarted) would leave the model running, and its slot held, until the engine's timeout. So the state is
 * re-read too: for every job this worker runs in one statement, after the fan-out reconnects (`resync`) and every
 * JOB_STATE_CHECK_MS while a job runs.
 */
@Injectable()
export class RunningJobs implements OnApplicationShutdown {
  private readonly logger = new Logger(RunningJobs.name);
  private readonly followed = new Set<Followed>();
  private timer?: NodeJS.Timeout;
  private checking?: Promise<void>;
  /** A check was asked for while one ran: that one may have read the state before the change it must find. */
  private checkAgain = false;
  private failing = false;

  constructor(
    private readonly events: JobEvents,
    private readonly items: HistoryRepository,
    private readonly config: AppConfig,
  ) {}

  /**
   * Follows item `id` until `stop` is called: `ended` aborts once the item is final or gone. Resolves once its events
   * are heard, so that an end committed after it resolves is not missed.
   */
  async follow(id: string): Promise<{ ended: AbortSignal; stop(): void }> {
    const job: Followed = { id, ended: new AbortController() };
    const unwatch = await this.events.watch({ historyItemId: id }, (event) => {
      if (event.kind === 'completed' || event.kind === 'failed' || event.kind === 'deleted') {
        job.ended.abort(new Error(`item ${event.kind}`));
      } else if (event.kind === 'resync') {
        // Every job's listener hears it; one check serves them all.
        void this.check();
      }
    });
    this.followed.add(job);
    // The checks serve every job this worker runs: they are no part of the trace of the job that started them.
    this.timer ??= outsideTraces(() => setInterval(() => void this.check(), this.config.jobStateCheckMs).unref());
    return {
      ended: job.ended.signal,
      stop: () => {
        unwatch();
        this.followed.delete(job);
        if (this.followed.size > 0) return;
        clearInterval(this.timer);
        this.timer = undefined;
      },
    };
  }

  async onApplicationShutdown(): Promise<void> {
    clearInterval(this.timer);
    await this.checking;
  }

  /** Re-reads the state of every followed job, and ends those whose item is no longer pending. */
  check(): Promise<void> {
    if (this.checking) {
      this.checkAgain = true;
      return this.checking;
    }
    this.checking = this.checkFollowed().finally(() => {
      this.checking = undefined;
      if (this.checkAgain) {
        this.checkAgain = false;
        void this.check();
      }
    });
    return this.checking;
  }

  private async checkFollowed(): Promise<void> {
    const jobs = [...this.followed].filter((job) => !job.ended.signal.aborted);
    if (jobs.length === 0) return;
    let pending: Set<string>;
    try {
      pending = new Set(await this.items.pendingAmong([...new Set(jobs.map((job) => job.id))]));
    } catch (error) {
      // The jobs run on; the next check tries again. Logged once per outage, not every few seconds.
      if (!this.failing) this.logger.warn({ err: error }, "running jobs' state could not be checked");
      this.failing = true;
      return;
    }
    this.failing = false;
    for (const job of jobs) {
      if (pending.has(job.id) || !this.followed.has(job) || job.ended.signal.aborted) continue;
      this.logger.log({ id: job.id }, 'a running job was found no longer pending by the state check: stopping it');
      job.ended.abort(new Error('item no longer pending'));
    }
  }
}
