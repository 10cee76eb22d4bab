import { Inject, Injectable, Logger } from '@nestjs/common';
import { EngineRegistry } from '../engines/index.js';
import { INPUT_STORE, MEDIA_STORE } from '../media/media.js';
import type { ObjectStore } from '../media/object-store.js';
import { Metrics } from '../metrics/metrics.js';
import { JobQueue } from '../queue/job-queue.js';
import { WebhookQueue } from '../queue/webhook-queue.js';
import { inputKeysOf, type JobErrorCode, type JobStatus } from './history-item.entity.js';
import { EngineRuns } from './engine-runs.js';
import { type EndedRow, HistoryRepository, type JobRow, type NewHistoryItem } from './history.repository.js';
import { JobEvents } from './job-events.js';
import { JobProgress } from './job-progress.js';
import { OutputLease } from './output-lease.js';
import { QueueLine } from './queue-line.js';

/**
 * Items whose files a retention sweep removes at once: enough to overlap storage round trips, few enough to leave
 * the file system's threads and the bucket's connections to the jobs running beside it.
 */
const FILE_REMOVALS_AT_ONCE = 8;

const TIMEOUT_MESSAGE = 'The job did not finish in time.';

/**
 * The one place a job changes state, with the files each change leaves behind and the event it announces:
 *
 *   (accepted) -> pending -> complete | error        both final; nothing else, ever
 *                                                    (`error` includes `canceled`, by the user)
 *   any state  -> (deleted)                          by the user; a final one also when it expires (retention)
 *
 * Every change is a database update guarded by the current status, so of two deliveries of one job, a worker and
 * the reconciler, or a worker and a delete, exactly one decides the outcome. The inputs (people's photos) are
 * removed as soon as the item is final or gone; the outputs exist only for a complete item. A row goes before its
 * files: what a failure or a crash leaves behind is a file no row keeps, which the stores' sweeps remove
 * (`UploadLeftovers` for inputs, `ResultLeftovers` for results), never a row pointing to files that are gone.
 */
@Injectable()
export class JobLifecycle {
  private readonly logger = new Logger(JobLifecycle.name);

  constructor(
    private readonly items: HistoryRepository,
    private readonly queue: JobQueue,
    private readonly webhooks: WebhookQueue,
    private readonly events: JobEvents,
    private readonly progress: JobProgress,
    private readonly runs: EngineRuns,
    private readonly metrics: Metrics,
    private readonly lease: OutputLease,
    private readonly line: QueueLine,
    private readonly engines: EngineRegistry,
    @Inject(INPUT_STORE) private readonly inputs: ObjectStore,
    @Inject(MEDIA_STORE) private readonly media: ObjectStore,
  ) {}

  /**
   * Records the item (its inputs already stored) and queues its job. The row is written first and is the outbox the
   * reconciler re-queues from; if queueing fails, the row and inputs go again and the error is passed on, so nothing
   * half-accepted stays behind. Resolves false, storing nothing, when the user has `maxPending` pending items; the
   * inputs go too when the row cannot be written (the user was removed meanwhile, the database is down).
   */
  async accept(item: NewHistoryItem, maxPending: number): Promise<boolean> {
    let created: boolean;
    try {
      created = await this.items.createWithinPendingLimit(item, maxPending);
    } catch (error) {
      await this.inputs.delete(inputKeysOf(item.inputs));
      throw error;
    }
    if (!created) {
      await this.inputs.delete(inputKeysOf(item.inputs));
      return false;
    }
    try {
      // In line before a worker can take it: a job that started before it joined would stand in line for good.
      await this.line.join(item.id, this.engines.route(item.tool, item.generationType).engineName, item.userId);
      await this.queue.enqueue(item.id);
    } catch (error) {
      await this.line.leave(item.id);
      await this.items.deleteOwned(item.userId, item.id);
      await this.inputs.delete(inputKeysOf(item.inputs));
      throw error;
    }
    this.events.announce({ kind: 'created', historyItemId: item.id, userId: item.userId, status: 'pending' });
    return true;
  }

  /**
   * Queues a pending job again whose queue job was lost or ended without an outcome (the reconciler). One that never
   * started keeps its place in its engine's line, or, when Redis lost the line with the job, joins it at the back.
   */
  async requeue(id: string): Promise<void> {
    const job = await this.items.notStarted(id);
    if (job) await this.line.join(id, this.engines.route(job.tool, job.generationType).engineName, job.userId);
    await this.queue.requeue(id);
  }

  /**
   * A worker began running the job: it got its engine's slot, or, for an engine without slots, its worker took it.
   * Recorded once (a retry keeps the first start) and announced as `started`; the job leaves its engine's line, and
   * the jobs behind it move up.
   */
  async start(job: { id: string }): Promise<void> {
    const started = await this.items.markStarted(job.id);
    await this.line.leave(job.id);
    if (started) {
      this.events.announce({ kind: 'started', historyItemId: job.id, userId: started.userId, status: 'pending' });
    }
  }

  /**
   * Writes the outputs (`writeOutputs`), then marks the item complete in one short update: no transaction or row lock
   * is held while storage answers. Runs of one job write one at a time (`OutputLease`) and only while the item is
   * pending, so a complete item's files are never rewritten; a run that loses the race to a delete, a cancel or a
   * timeout removes what it wrote, so an item that is gone or ended keeps no media files (if that removal fails too,
   * `ResultLeftovers` takes them). `outputSeeds` has each result's seed (null where the model takes none), one per
   * result written. Resolves false when the result was dropped.
   */
  async complete(
    id: string,
    writeOutputs: () => Promise<void>,
    outputSeeds: readonly (number | null)[] = [null],
  ): Promise<boolean> {
    const item = await this.lease.whileHeld(id, async () => {
      if ((await this.items.statusOf(id)) !== 'pending') return undefined;
      try {
        // A run killed between a temporary file and its rename left partial files; under the lease no other run writes.
        await this.media.deleteFolder(id);
        await writeOutputs();
      } catch (error) {
        await this.media.deleteFolder(id).catch(() => {});
        // A delete, a cancel or a timeout removing the folder under the writes loses them their folder: the race is
        // lost, not the attempt. Otherwise the attempt fails, and a retry writes them again.
        if ((await this.items.statusOf(id)) !== 'pending') return undefined;
        throw error;
      }
      const completed = await this.items.completeWhilePending(id, outputSeeds);
      if (!completed && (await this.items.statusOf(id)) !== 'complete') await this.removeOutputs(id);
      return completed;
    });
    if (!item) return false;
    await this.ended(item, 'complete');
    return true;
  }

  /** `message` is what the client reads in `error.message`: plain words, nothing from inside the machine. */
  async fail(id: string, code: JobErrorCode, message: string): Promise<boolean> {
    const item = await this.items.failWhilePending(id, code, message);
    if (!item) return false;
    await this.ended(item, code);
    return true;
  }

  /**
   * Cancels a user's pending job: it ends `error` (`canceled`). A queued job is dropped, with the model run an earlier
   * attempt left going; a running one is stopped by its worker, which watches for the change, and its result is thrown
   * away. Resolves the item's status instead when it was already final, and undefined when the user has no such item.
   */
  async cancel(userId: string, id: string): Promise<'canceled' | JobStatus | undefined> {
    const item = await this.items.failOwnedWhilePending(userId, id, 'canceled', 'The job was canceled.');
    if (typeof item !== 'object') return item;
    const dropped = await this.queue.drop(id);
    await this.ended(item, 'canceled');
    await this.stopLeftRun(item, dropped);
    return 'canceled';
  }

  /**
   * Ends a job pending past its deadline `timeout` (the reconciler's sweep): its queued job is dropped, and the run an
   * earlier attempt left going is stopped, as for a cancel; a running one is stopped by its worker. Resolves false when
   * the item was no longer pending.
   */
  async timeOut(id: string): Promise<boolean> {
    const item = await this.items.failWhilePending(id, 'timeout', TIMEOUT_MESSAGE);
    const dropped = await this.queue.drop(id);
    if (!item) return false;
    await this.ended(item, 'timeout');
    await this.stopLeftRun(item, dropped);
    return true;
  }

  /**
   * Ends `timeout` a pending job that a worker took past its deadline, as the reconciler's sweep would have, without
   * running it. The worker holds the job, so nobody else stops the run an earlier attempt left going: this does.
   */
  async timeOutTaken(job: JobRow): Promise<void> {
    const item = await this.items.failWhilePending(job.id, 'timeout', TIMEOUT_MESSAGE);
    if (item) await this.ended(item, 'timeout');
    await this.runs.abandon(job);
  }

  /**
   * Deletes a user's item, whatever its state: gone for the client at once. A queued job is dropped, with the model
   * run an earlier attempt left going, and so is a webhook message still to be sent; a job a worker runs is stopped
   * by that worker, told by the `deleted` event. The row goes first, then the files; files that cannot be removed now
   * are left to the stores' sweeps, and the delete still succeeds. Resolves false when the user has no such item.
   */
  async delete(userId: string, id: string): Promise<boolean> {
    const item = await this.items.deleteOwned(userId, id);
    if (!item) return false;
    await Promise.all([this.queue.drop(id), this.webhooks.drop(id), this.progress.forget(id), this.line.leave(id)]);
    await this.removeFiles(item, { keepOutputs: false });
    this.events.announce({ kind: 'deleted', historyItemId: id, userId, status: item.status });
    // A final item's job is over: no run of it is left going. A pending one's run is stopped here even when a worker
    // holds its job: one that took the job as the row went finds no row, so nothing to tell it the run's route by (a
    // worker already running it is told by the announcement, and stopping a run twice does no harm).
    if (item.status === 'pending') await this.runs.abandon(item);
    return true;
  }

  /**
   * Removes up to `limit` of the final items that ended more than `retentionMs` ago, each as its user's delete
   * would: its row, its files, a `deleted` event. Pending items are never touched. An item whose files cannot be
   * removed is logged and counted (`igs_retention_failures_total`) and the others go on; its row is gone already, so
   * the next sweep does not pick it again, and the stores' sweeps remove its files later. Resolves how many items were
   * looked at (fewer than `limit`: nothing more is due).
   */
  async expire(retentionMs: number, limit: number): Promise<number> {
    const due = await this.items.finalEndedBefore(retentionMs / 1000, limit);
    // A final item's job is over: Bull ages its record out on its own, there is nothing queued to drop.
    const deleted = due.length > 0 ? await this.items.deleteFinal(due.map((item) => item.id)) : [];
    let failures = 0;
    for (let start = 0; start < deleted.length; start += FILE_REMOVALS_AT_ONCE) {
      const removed = await Promise.all(
        deleted
          .slice(start, start + FILE_REMOVALS_AT_ONCE)
          .map((item) => this.removeFiles(item, { keepOutputs: false })),
      );
      failures += removed.filter((done) => !done).length;
    }
    if (failures > 0) this.metrics.countRetentionFailures(failures);
    for (const item of deleted) {
      this.events.announce({ kind: 'deleted', historyItemId: item.id, userId: item.userId, status: item.status });
    }
    return due.length;
  }

  /**
   * Finishes the clean-up of an item a job found final or gone: a run killed after recording the outcome but before
   * removing files is delivered again, and no input photo may outlive its job.
   */
  async removeLeftovers(id: string, item: JobRow | undefined): Promise<void> {
    // A deleted item's inputs went with its row: the request that deleted it removed them.
    if (item?.status === 'pending') return;
    // Left in line by a failed removal at its end: no job behind it is to wait for it.
    await this.line.leave(id);
    if (!item) return this.removeOutputs(id);
    // Ended while this worker held its job, so the request that ended it could not drop it (nor stop its run).
    if (item.status !== 'complete') await this.runs.abandon(item);
    await this.removeFiles(item, { keepOutputs: item.status === 'complete' });
  }

  /**
   * Stops the model run an earlier attempt of a pending job left going (a rollout, a retry's backoff), once the job is
   * out of the queue (`dropped`): nobody will follow it now. A job a worker holds is left to that worker, which stops
   * its own run. Called after the end is announced: a model server that does not answer holds the stop for its
   * engine's cleanup timeout (seconds), and streams and webhooks are not to wait for it.
   */
  private async stopLeftRun(item: EndedRow, dropped: boolean): Promise<void> {
    if (dropped) await this.runs.abandon(item);
  }

  private async ended(item: EndedRow, outcome: 'complete' | JobErrorCode): Promise<void> {
    this.metrics.countJobOutcome(item.tool, outcome);
    await Promise.all([this.removeFiles(item, { keepOutputs: outcome === 'complete' }), this.line.leave(item.id)]);
    this.events.announce({
      kind: outcome === 'complete' ? 'completed' : 'failed',
      historyItemId: item.id,
      userId: item.userId,
      status: item.status,
    });
  }

  /**
   * Removes an item's inputs and, unless kept, its outputs. A failure is logged, not raised: the item's outcome stands,
   * and what is left has no row keeping it once the item is gone or ended, so the stores' sweeps remove it. Resolves
   * whether everything went.
   */
  private async removeFiles(item: EndedRow, { keepOutputs }: { keepOutputs: boolean }): Promise<boolean> {
    const [inputs, outputs] = await Promise.allSettled([
      this.inputs.delete(inputKeysOf(item.inputs)),
      keepOutputs ? undefined : this.media.deleteFolder(item.id),
    ]);
    for (const removal of [inputs, outputs]) {
      if (removal.status === 'rejected') this.warnFilesLeft(item.id, removal.reason);
    }
    return inputs.status === 'fulfilled' && outputs.status === 'fulfilled';
  }

  private async removeOutputs(id: string): Promise<void> {
    await this.media.deleteFolder(id).catch((error: unknown) => this.warnFilesLeft(id, error));
  }

  private warnFilesLeft(id: string, error: unknown): void {
    this.logger.warn({ id, err: error }, "could not remove an item's files now: the store's sweep removes them later");
  }
}
