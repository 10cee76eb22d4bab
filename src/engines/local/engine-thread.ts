/**
 * The task of a local-engine thread of the pool (see ThreadedLocalEngine): runs one job on the LocalEngine, renders
 * its result into the two output files, and answers with those or a description of its error.
 */
import { receiveMessageOnPort, workerData } from 'node:worker_threads';
import { renderOutputs } from '../renderer.js';
import {
  ENCODED,
  type ProgressMessage,
  type ThreadResult,
  type ThreadTask,
  asBuffer,
  describeError,
} from './engine-thread.protocol.js';
import { LocalEngine } from './local.engine.js';
import { personModels } from './person-model.js';

const { limitInputPixels } = workerData as { limitInputPixels: number };
const engine = new LocalEngine({ limitInputPixels });
// Loaded as the thread starts, not by its first try-on; a failure to load is that try-on's error.
personModels().catch(() => undefined);

export default async function runJob({ request, port }: ThreadTask): Promise<ThreadResult> {
  const running = new AbortController();
  const abort = () => running.abort();
  // An abort sent while the job waited for a thread is on the port already: the job does not start.
  if (receiveMessageOnPort(port)) abort();
  port.on('message', abort);
  try {
    const images = Object.fromEntries(Object.entries(request.images).map(([name, bytes]) => [name, asBuffer(bytes)]));
    const onProgress = (fraction: number) => port.postMessage({ type: 'progress', fraction } satisfies ProgressMessage);
    const image = await engine.generate({ ...request, images, signal: running.signal, onProgress });
    // Encoded here, the raw pixels (megabytes a job) never reach the service's thread, whose large heap
    // each such allocation would push towards a full garbage collection; only the files cross, copied.
    const outputs = await renderOutputs(image, limitInputPixels);
    onProgress(ENCODED);
    return { type: 'done', outputs };
  } catch (error) {
    return running.signal.aborted ? { type: 'stopped' } : { type: 'failed', error: describeError(error) };
  } finally {
    port.close();
  }
}
