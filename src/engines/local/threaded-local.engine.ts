import { MessageChannel, type MessagePort, receiveMessageOnPort } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type { Engine, EngineImage, EngineRequest } from '../engine.js';
import {
  type AbortMessage,
  type ProgressMessage,
  type ThreadResult,
  type ThreadTask,
  asBuffer,
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
 * Threads start on first use and stay. One that dies fails its job (a plain error: retried) and another starts for
 * the next job. A cancelled job is stopped by the thread itself at its next checkpoint (piscina's own abort would
 * end the thread, and with it the person models it loaded).
 */
export class ThreadedLocalEngine implements Engine {
  private readonly pool: Piscina<ThreadTask, ThreadResult>;
  private closed = false;

  constructor(threads: number, limitInputPixels: number) {
    this.pool = new Piscina({
      filename: new URL('./engine-thread.js', import.meta.url).href,
      minThreads: 0,
      maxThreads: threads,
      idleTimeout: Infinity,
      // Waiting for tasks with Atomics.wait would block an idle thread's event loop, where its person models load.
      atomics: 'disabled',
      recordTiming: false,
      workerData: { limitInputPixels },
    });
    // An idle thread that dies has no job to fail; the pool starts another when one is needed.
    this.pool.on('error', () => undefined);
  }

  async generate(request: EngineRequest): Promise<EngineImage> {
    checkAborted(request.signal);
    const { signal, onProgress } = request;
    // The job's own channel: its abort goes to the thread, its progress comes back.
    const { port1: port, port2: threadPort } = new MessageChannel();
    const progress = ({ fraction }: ProgressMessage) => onProgress?.(fraction);
    port.on('message', progress);
    const abort = () => port.postMessage({ type: 'abort' } satisfies AbortMessage);
    signal?.addEventListener('abort', abort, { once: true });
    let result: ThreadResult;
    try {
      const task: ThreadTask = {
        request: {
          jobId: request.jobId,
          tool: request.tool,
          generationType: request.generationType,
          images: request.images,
          texts: request.texts,
        },
        port: threadPort,
      };
      result = await this.pool.run(task, { transferList: [threadPort] });
      // The result came on another channel: progress the thread reported before it may still be waiting here.
      drain(port, progress);
    } catch (error) {
      throw this.closed ? new Error('the engine thread was stopped') : error;
    } finally {
      signal?.removeEventListener('abort', abort);
      port.close();
    }
    if (result.type === 'stopped') throw signal?.reason;
    if (result.type === 'failed') throw errorFrom(result.error);
    const { stock, preview } = result.outputs;
    return { kind: 'rendered', outputs: { stock: asBuffer(stock), preview: asBuffer(preview) } };
  }

  /** Stops every thread; a job still running fails. */
  async close(): Promise<void> {
    this.closed = true;
    await this.pool.destroy();
  }
}

function drain(port: MessagePort, handle: (message: ProgressMessage) => void): void {
  for (let entry = receiveMessageOnPort(port); entry; entry = receiveMessageOnPort(port)) {
    handle(entry.message as ProgressMessage);
  }
}
