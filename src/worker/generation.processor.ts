import { InjectQueue } from '@nestjs/bull';
import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
} from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import type { Job, Queue } from 'bull';
import { DataSource } from 'typeorm';
import { AppConfig } from '../config/config.js';
import { GENERATE_JOB, type GenerateJobData, GENERATION_QUEUE } from '../generation/generation.queue.js';
import { HistoryItem, inputKeysOf } from '../history/history-item.entity.js';
import { INPUT_STORE, MEDIA_STORE, outputKey } from '../media/media.js';
import type { ObjectStore } from '../media/object-store.js';
import { Metrics } from '../metrics/metrics.js';
import { PermanentEngineError } from './engines/engine.js';
import { EngineRegistry } from './engines/engine-registry.js';
import { JobOutcomes } from './job-outcomes.js';
import { renderOutputs } from './renderer.js';

/**
 * Runs generation jobs. Bull delivers a job at least once, so every step is safe to repeat: outputs go
 * to fixed keys, and the final status is written only while the item is still pending.
 */
@Injectable()
export class GenerationProcessor implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger(GenerationProcessor.name);
  /** Aborted on shutdown, so engines stop early and the job goes back to the queue. */
  private readonly shutdown = new AbortController();

  constructor(
    @InjectQueue(GENERATION_QUEUE) private readonly queue: Queue<GenerateJobData>,
    @InjectDataSource() private readonly dataSource: DataSource,
    @Inject(INPUT_STORE) private readonly inputs: ObjectStore,
    @Inject(MEDIA_STORE) private readonly media: ObjectStore,
    private readonly outcomes: JobOutcomes,
    private readonly engines: EngineRegistry,
    private readonly config: AppConfig,
    private readonly metrics: Metrics,
  ) {}

  onApplicationBootstrap(): void {
    void this.queue.process(GENERATE_JOB, this.config.workerConcurrency, (job) => this.run(job));
    // Jobs that failed without reaching the processor's own bookkeeping (stalled too often) end here.
    this.queue.on('failed', (job: Job<GenerateJobData>, error: Error) => {
      if (job.attemptsMade >= (job.opts.attempts ?? 1)) {
        this.logger.warn({ id: job.data.historyItemId, err: error.message }, 'job failed');
        void this.outcomes
          .fail(job.data.historyItemId, 'engine_failed', 'The job could not be processed.')
          .catch(() => {});
      }
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
      this.logger.warn('running jobs did not finish in time; they return to the queue when their lock expires');
      this.shutdown.abort(new Error('worker shutting down'));
    }
  }

  async run(job: Job<GenerateJobData>): Promise<void> {
    const id = job.data.historyItemId;
    const item = await this.dataSource.getRepository(HistoryItem).findOneBy({ id });
    if (!item || item.status !== 'pending') {
      // A run killed after recording the outcome but before deleting files is delivered again (its job stalled):
      // finish its clean-up, so that no input photo outlives the job. Only a complete item keeps its outputs.
      // A deleted item's inputs went with its row: the request that deleted it removed them.
      await Promise.all([
        item ? this.inputs.delete(inputKeysOf(item.inputs)) : undefined,
        item?.status === 'complete' ? undefined : this.media.deleteFolder(id),
      ]);
      return;
    }
    // A later attempt's wait includes its backoff, which says nothing about the queue.
    if (job.attemptsMade === 0) this.metrics.observeQueueWait(item.tool, (Date.now() - job.timestamp) / 1000);
    const endAttempt = this.metrics.startAttempt(item.tool);

    try {
      const images: Record<string, Buffer> = {};
      for (const [name, input] of Object.entries(item.inputs)) images[name] = await this.inputs.get(input.key);
      const signal = AbortSignal.any([this.shutdown.signal, AbortSignal.timeout(this.config.engineTimeoutMs)]);
      const started = performance.now();
      const result = await this.metrics.timeEngine(item.tool, this.config.engines[item.tool].kind, () =>
        this.engines
          .for(item.tool)
          .generate({ tool: item.tool, generationType: item.generationType, images, texts: item.texts, signal }),
      );
      const outputs = await renderOutputs(result, this.config.imageMaxPixels);
      const completed = await this.outcomes.complete(id, async () => {
        await Promise.all([
          this.media.put(outputKey(id, 'stock'), outputs.stock),
          this.media.put(outputKey(id, 'preview'), outputs.preview),
        ]);
      });
      const ms = Math.round(performance.now() - started);
      endAttempt(completed ? 'complete' : 'dropped');
      if (completed) this.logger.log({ id, tool: item.tool, ms }, 'job complete');
      else this.logger.log({ id, tool: item.tool, ms }, 'result dropped: the item was deleted or ended meanwhile');
    } catch (error) {
      endAttempt('failed');
      await this.fail(job, error);
    }
  }

  /** Permanent failures end the job at once; others are retried by Bull until the last attempt. */
  private async fail(job: Job<GenerateJobData>, error: unknown): Promise<never> {
    const id = job.data.historyItemId;
    const message = error instanceof Error ? error.message : String(error);
    if (this.shutdown.signal.aborted) throw error;
    if (error instanceof PermanentEngineError) {
      this.logger.warn({ id, code: error.code, err: message }, 'job failed permanently');
      // The engine's own message (its URL, its answer) stays in the log above; the client reads plain words.
      await this.outcomes.fail(
        id,
        error.code,
        error.code === 'invalid_image'
          ? 'An input image could not be decoded.'
          : 'The engine could not process the job.',
      );
      await job.discard();
      throw error;
    }
    const lastAttempt = job.attemptsMade + 1 >= (job.opts.attempts ?? 1);
    this.logger.warn({ id, attempt: job.attemptsMade + 1, err: message }, 'job attempt failed');
    if (lastAttempt) {
      await (isTimeout(error)
        ? this.outcomes.fail(id, 'timeout', 'The engine did not answer in time.')
        : this.outcomes.fail(id, 'engine_failed', `The engine failed ${job.attemptsMade + 1} times.`));
    }
    throw error;
  }
}

function isTimeout(error: unknown): boolean {
  return error instanceof Error && (error.name === 'TimeoutError' || /timed? ?out/i.test(error.message));
}
