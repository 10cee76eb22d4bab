import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { inSpan } from '../common/tracing.js';
import { AppConfig } from '../config/config.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { EngineRuns, type JobRuns } from '../jobs/engine-runs.js';
import { JobLifecycle } from '../jobs/job-lifecycle.js';
import { JobProgress } from '../jobs/job-progress.js';
import { INPUT_STORE, MEDIA_STORE, outputKey } from '../media/media.js';
import type { ObjectStore } from '../media/object-store.js';
import { Metrics } from '../metrics/metrics.js';
import { type Delivery, JobQueue } from '../queue/job-queue.js';
import {
  type RenderedOutputs,
  EngineRegistry,
  type EngineSlot,
  EngineTimeoutError,
  PermanentEngineError,
  plainImage,
  renderOutputs,
  RunHandedOver,
  WorkerShutdown,
} from '../engines/index.js';
import { EngineSlots } from './engine-slots.js';
import { generateResults } from './job-results.js';
import { RunningJobs } from './running-jobs.js';

/** How long jobs stopped by a shutdown get to record their stop (their attempt, the model run's cancel, their spans). */
const STOPPING_MS = 5_000;

/** An attempt this worker cut short as it shut down: the job's own outcome is still to come, from another worker. */
class StoppedByShutdown extends Error {
  constructor(cause: unknown) {
    super('the worker shut down while the job ran', { cause });
    this.name = 'StoppedByShutdown';
  }
}

/**
 * Runs generation jobs. The queue delivers a job at least once, so every step is safe to repeat: outputs go to fixed
 * keys, and the lifecycle records an outcome only while the item is still pending.
 */
@Injectable()
export class GenerationProcessor implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(GenerationProcessor.name);
  /** Aborted on shutdown, so engines stop early and the job goes back to the queue. */
  private readonly shutdown = new AbortController();
  /** Final failures being written, which the shutdown waits for. */
  private readonly failing = new Set<Promise<unknown>>();

  constructor(
    private readonly queue: JobQueue,
    private readonly items: HistoryRepository,
    private readonly lifecycle: JobLifecycle,
    private readonly running: RunningJobs,
    @Inject(INPUT_STORE) private readonly inputs: ObjectStore,
    @Inject(MEDIA_STORE) private readonly media: ObjectStore,
    private readonly engines: EngineRegistry,
    private readonly slots: EngineSlots,
    private readonly runs: EngineRuns,
    private readonly progress: JobProgress,
    private readonly config: AppConfig,
    private readonly metrics: Metrics,
  ) {}

  onApplicationBootstrap(): void {
    // WORKER_CONCURRENCY jobs at once, of any engine: local ones each on an engine thread, remote ones mostly waiting
    // on their model server (docs/engines.md says how to size it for GPUs).
    this.queue.process(this.config.workerConcurrency, (delivery) => this.run(delivery));
    // Jobs that failed without reaching the processor's own bookkeeping (stalled too often) end here.
    this.queue.onFinalFailure((id, error) => {
      // Cut short on its last attempt by this worker's shutdown, not failed by its engine: the item stays pending, and
      // the reconciler queues it again with its attempts anew.
      if (error instanceof StoppedByShutdown) return;
      this.logger.warn({ id, err: error.message }, 'job failed');
      const failing = this.lifecycle.fail(id, 'engine_failed', 'The job could not be processed.').catch(() => {});
      this.failing.add(failing);
      void failing.finally(() => this.failing.delete(failing));
    });
  }

  /** Stops taking jobs and lets running ones finish, for at most SHUTDOWN_TIMEOUT_MS. */
  async beforeApplicationShutdown(): Promise<void> {
    const closed = this.queue.close();
    const timedOut = await Promise.race([
      closed.then(() => false),
      new Promise<boolean>((resolve) => setTimeout(resolve, this.config.shutdownTimeoutMs, true).unref()),
    ]);
    if (timedOut) {
      this.logger.warn(
        'running jobs did not finish in time: another worker runs them again, following a ComfyUI prompt or a Replicate prediction left running, starting a Cog or local run over',
      );
      this.shutdown.abort(new WorkerShutdown());
      await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, STOPPING_MS).unref())]);
    }
    await Promise.all(this.failing);
  }

  async run(delivery: Delivery): Promise<void> {
    const id = delivery.historyItemId;
    // Canceled, deleted or timed out meanwhile (by an API request or the reconciler, in any process): the engine
    // stops early, since its result would be thrown away, and tells its model server to stop. Followed before the item
    // is read, so an end committed just after the read is not missed.
    const followed = await this.running.follow(id);
    try {
      await this.runWatched(delivery, followed.ended);
    } finally {
      followed.stop();
    }
  }

  private async runWatched(delivery: Delivery, endedElsewhere: AbortSignal): Promise<void> {
    const id = delivery.historyItemId;
    const item = await this.items.findJob(id, this.config.jobDeadlineMs / 1000);
    if (!item) {
      // Deleting an item drops its queued job, so this is a deletion racing the job's start, or jobs of another
      // database: a deployment sharing this Redis and prefix takes this one's jobs, which the reconciler re-queues.
      this.logger.warn(
        { id },
        "a job for an item this database does not have: deleted as it started, or another deployment's (REDIS_PREFIX)",
      );
    }
    if (item?.status !== 'pending') return this.lifecycle.removeLeftovers(id, item);
    // Queued (or queued again) for longer than its deadline: it ends as the reconciler would end it, and never runs.
    if (item.overdue) return this.lifecycle.timeOutTaken(item);
    // A later attempt's wait includes its backoff, which says nothing about the queue.
    if (delivery.attemptsMade === 0) this.metrics.observeQueueWait(item.tool, (Date.now() - delivery.queuedAt) / 1000);
    const route = this.engines.route(item.tool, item.generationType);
    const endAttempt = this.metrics.startAttempt(item.tool);
    const stopped = AbortSignal.any([this.shutdown.signal, endedElsewhere]);
    const progress = this.progress.start({ id, userId: item.userId });
    // A job waiting for its engine's slot stays pending; the engine's timeout does not run while it waits.
    const turn = this.slots.turn(route, id, stopped);
    const runs = this.runs.for(id, route.engineName);
    let handedOver = false;
    // Started once it has its engine's slot: until then it waits in its engine's line like a job still queued.
    let started: Promise<void> | undefined;
    const start = () => (started ??= this.lifecycle.start(item));
    const slot: EngineSlot | undefined = turn.slot && {
      take: async () => {
        const server = await turn.slot!.take();
        await start();
        return server;
      },
      free: () => turn.slot!.free(),
    };

    try {
      if (!slot) await start();
      // A run an earlier attempt left on a server the job's route no longer leads to (a rollout changed the routing
      // file) would go on with nobody to take its result.
      await this.runs.abandon(item, route.engineName);
      const images: Record<string, Buffer> = {};
      for (const [name, input] of Object.entries(item.inputs)) {
        const stored = await this.inputs.get(input.key);
        // The local engine turns a photo upright itself and keeps it in this process; a model server gets it plain.
        images[name] = route.kind === 'local' ? stored : await plainImage(stored, name, this.config.imageMaxPixels);
      }
      const signal = AbortSignal.any([stopped, turn.deadline]);
      const started = performance.now();
      const engineAttributes = {
        'igs.tool': item.tool,
        'igs.generation_type': item.generationType,
        'igs.engine.kind': route.kind,
        'igs.engine.name': route.engineName,
      };
      const results = await inSpan('engine generate', { attributes: engineAttributes }, async (span) => {
        try {
          const generated = await this.metrics.timeEngine(item.tool, route.kind, () =>
            generateResults(
              route,
              item,
              {
                jobId: id,
                tool: item.tool,
                generationType: item.generationType,
                images,
                texts: item.texts,
                signal,
                onProgress: progress.report,
                slot,
              },
              runs,
            ),
          );
          span.setAttribute('igs.outcome', 'complete');
          return generated;
        } catch (error) {
          span.setAttribute('igs.outcome', engineOutcome(error, stopped, turn.deadline));
          if (error instanceof PermanentEngineError) span.setAttribute('error.type', error.code);
          throw error;
        }
      });
      await turn.end();
      progress.end();
      const outputs: RenderedOutputs[] = [];
      // One at a time: each holds a full-resolution image while it is encoded.
      for (const { image } of results) outputs.push(await renderOutputs(image, this.config.outputMaxPixels));
      const completed = await this.lifecycle.complete(
        id,
        () =>
          inSpan('store outputs', { attributes: { 'igs.item_id': id } }, async () => {
            await Promise.all(
              outputs.flatMap((output, index) => [
                this.media.put(outputKey(id, 'stock', index), output.stock),
                this.media.put(outputKey(id, 'preview', index), output.preview),
              ]),
            );
          }),
        results.map(({ seed }) => seed ?? null),
      );
      await this.forgetRun(id, runs);
      const ms = Math.round(performance.now() - started);
      endAttempt(completed ? 'complete' : 'dropped');
      if (completed) this.logger.log({ id, tool: item.tool, engine: route.engineName, ms }, 'job complete');
      else this.logger.log({ id, tool: item.tool, ms }, 'result dropped: the item was deleted or ended meanwhile');
    } catch (error) {
      handedOver = error instanceof RunHandedOver;
      if (endedElsewhere.aborted) {
        endAttempt('dropped');
        this.logger.log({ id, tool: item.tool }, 'job stopped: the item was canceled, deleted or ended meanwhile');
        return;
      }
      endAttempt('failed');
      await this.fail(delivery, error, turn.deadline.aborted, runs);
    } finally {
      progress.end();
      if (handedOver) turn.handOver();
      else await turn.end();
    }
  }

  /** Permanent failures end the job at once; others are retried by the queue until the last attempt. */
  private async fail(delivery: Delivery, error: unknown, pastDeadline: boolean, runs: JobRuns): Promise<never> {
    const id = delivery.historyItemId;
    const message = error instanceof Error ? error.message : String(error);
    if (this.shutdown.signal.aborted) throw new StoppedByShutdown(error);
    if (error instanceof PermanentEngineError) {
      this.logger.warn({ id, code: error.code, err: message }, 'job failed permanently');
      // The engine's own message (its URL, its answer) stays in the log above; the client reads plain words, or the
      // model's own message when the engine passed it on.
      await this.lifecycle.fail(id, error.code, clientMessageOf(error));
      await this.forgetRun(id, runs);
      await delivery.discard();
      throw error;
    }
    this.logger.warn({ id, attempt: delivery.attemptsMade + 1, err: message }, 'job attempt failed');
    if (delivery.isLastAttempt) {
      await (pastDeadline || error instanceof EngineTimeoutError
        ? this.lifecycle.fail(id, 'timeout', 'The engine did not answer in time.')
        : this.lifecycle.fail(id, 'engine_failed', `The engine failed ${delivery.attemptsMade + 1} times.`));
    }
    throw error;
  }

  /**
   * Forgets the job's model run once the job's end is committed, and not before: an attempt after a failure to store
   * the result (a database or storage blip) reads the output of the run it has, instead of paying for another. A
   * record Redis fails to forget lapses with its time to live; the job is over either way.
   */
  private async forgetRun(id: string, runs: JobRuns): Promise<void> {
    await runs.forget().catch((error: unknown) => {
      this.logger.warn({ id, err: (error as Error).message }, 'could not forget the run of a job that ended');
    });
  }
}

/**
 * How an engine call ended, for its span: `failed` (permanent: the job ends; `error.type` is the job's error code),
 * `retried` (the queue tries the attempt again, unless it was the last), `timeout`, `stopped` (the item ended
 * elsewhere, or the worker is shutting down).
 */
function engineOutcome(error: unknown, stopped: AbortSignal, deadline: AbortSignal): string {
  if (stopped.aborted) return 'stopped';
  if (deadline.aborted || error instanceof EngineTimeoutError) return 'timeout';
  return error instanceof PermanentEngineError ? 'failed' : 'retried';
}

/**
 * What the client reads in `error.message`. An engine's own message stays in the log (a model server's URL, its
 * answer), except where it is written for the client: what input would work.
 */
function clientMessageOf(error: PermanentEngineError): string {
  switch (error.code) {
    case 'invalid_image':
      return 'An input image could not be decoded.';
    case 'engine_failed':
      return error.clientMessage ?? 'The engine could not process the job.';
    default:
      return error.message;
  }
}
