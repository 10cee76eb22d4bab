import { Worker } from 'node:worker_threads';
import type { Engine, EngineImage, EngineRequest } from '../engine.js';
import {
  type JobMessage,
  type ThreadMessage,
  type ThreadReply,
  asBuffer,
  describeError,
  errorFrom,
} from './engine-thread.protocol.js';
import { checkAborted } from './raw-image.js';

/**
 * The local engine on worker threads, one per job the worker runs at once. The pipelines are JavaScript
 * pixel loops: on the service's own thread, concurrent jobs would take turns instead of using the cores,
 * every job would hold up the event loop (Bull's lock renewals, health checks) for tens of milliseconds at a
 * time, and every job's buffers would be garbage-collected in the service's large heap. A thread has a small
 * heap of its own and runs its job beside the others.
 *
 * Threads start on first use. One that dies fails its job with a retryable error and is replaced.
 */
export class ThreadedLocalEngine implements Engine {
  private readonly all = new Set<EngineThread>();
  private readonly idle: EngineThread[] = [];
  private readonly waiting: ((thread: EngineThread) => void)[] = [];

  constructor(
    private readonly threads: number,
    private readonly limitInputPixels: number,
  ) {}

  async generate(request: EngineRequest): Promise<EngineImage> {
    checkAborted(request.signal);
    const thread = await this.acquire();
    try {
      return await thread.run(request);
    } finally {
      this.release(thread);
    }
  }

  /** Stops every thread; a job still running fails. */
  async close(): Promise<void> {
    const threads = [...this.all];
    this.all.clear();
    this.idle.length = 0;
    await Promise.all(threads.map((thread) => thread.stop()));
  }

  private acquire(): Promise<EngineThread> {
    const thread = this.idle.pop();
    if (thread) return Promise.resolve(thread);
    if (this.all.size < this.threads) return Promise.resolve(this.start());
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  private release(thread: EngineThread): void {
    if (!thread.alive) this.all.delete(thread);
    const next = this.waiting.shift();
    if (!next) {
      if (thread.alive) this.idle.push(thread);
    } else {
      next(thread.alive ? thread : this.start());
    }
  }

  private start(): EngineThread {
    const thread = new EngineThread(this.limitInputPixels);
    this.all.add(thread);
    return thread;
  }
}

/** One worker thread running one job at a time. */
class EngineThread {
  alive = true;
  private readonly worker: Worker;
  private pending?: {
    resolve: (image: EngineImage) => void;
    reject: (error: Error) => void;
    onProgress?: (fraction: number) => void;
  };

  constructor(limitInputPixels: number) {
    this.worker = new Worker(new URL('./engine-thread.js', import.meta.url), { workerData: { limitInputPixels } });
    this.worker.on('message', (reply: ThreadReply) => {
      if (reply.type === 'progress') return this.pending?.onProgress?.(reply.fraction);
      const pending = this.pending;
      this.pending = undefined;
      if (reply.type === 'failed') return pending?.reject(errorFrom(reply.error));
      const { stock, preview } = reply.outputs;
      pending?.resolve({ kind: 'rendered', outputs: { stock: asBuffer(stock), preview: asBuffer(preview) } });
    });
    // An uncaught error in the thread (out of memory, a bug) ends it: its job may succeed on another try.
    this.worker.on('error', (error) => this.died(error));
    this.worker.on('exit', (code) => this.died(new Error(`the engine thread stopped (exit code ${code})`)));
  }

  run(request: EngineRequest): Promise<EngineImage> {
    const { signal, onProgress } = request;
    // Only data crosses to the thread: the signal and the progress callback stay here (see JobMessage).
    const job: JobMessage['request'] = {
      jobId: request.jobId,
      tool: request.tool,
      generationType: request.generationType,
      images: request.images,
      texts: request.texts,
    };
    return new Promise<EngineImage>((resolve, reject) => {
      if (!this.alive) return reject(new Error('the engine thread has stopped'));
      if (signal?.aborted) return reject(signal.reason as Error);
      const abort = () => this.post({ type: 'abort', reason: describeError(signal?.reason) });
      signal?.addEventListener('abort', abort, { once: true });
      const settled = () => signal?.removeEventListener('abort', abort);
      this.pending = {
        resolve: (image) => (settled(), resolve(image)),
        reject: (error) => (settled(), reject(error)),
        onProgress,
      };
      this.post({ type: 'job', request: job });
    });
  }

  async stop(): Promise<void> {
    this.died(new Error('the engine thread was stopped'));
    await this.worker.terminate();
  }

  private post(message: ThreadMessage): void {
    this.worker.postMessage(message);
  }

  private died(error: Error): void {
    if (!this.alive) return;
    this.alive = false;
    const pending = this.pending;
    this.pending = undefined;
    pending?.reject(error);
  }
}
