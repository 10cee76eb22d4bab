/**
 * The entry point of a local-engine thread (see ThreadedLocalEngine): runs one job at a time on the
 * LocalEngine, renders its result into the two output files, and answers with those or a description of
 * its error.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { renderOutputs } from '../renderer.js';
import {
  ENCODED,
  type JobMessage,
  type ThreadMessage,
  type ThreadReply,
  asBuffer,
  describeError,
  errorFrom,
} from './engine-thread.protocol.js';
import { LocalEngine } from './local.engine.js';
import { personModels } from './person-model.js';

const port = parentPort!;
const { limitInputPixels } = workerData as { limitInputPixels: number };
const engine = new LocalEngine({ limitInputPixels });
// Loaded as the thread starts, not by its first try-on; a failure to load is that try-on's error.
personModels().catch(() => undefined);
let running: AbortController | undefined;

port.on('message', (message: ThreadMessage) => {
  if (message.type === 'abort') {
    running?.abort(errorFrom(message.reason));
    return;
  }
  void run(message);
});

async function run({ request }: JobMessage): Promise<void> {
  running = new AbortController();
  let reply: ThreadReply;
  try {
    const images = Object.fromEntries(Object.entries(request.images).map(([name, bytes]) => [name, asBuffer(bytes)]));
    const onProgress = (fraction: number) => port.postMessage({ type: 'progress', fraction } satisfies ThreadReply);
    const image = await engine.generate({ ...request, images, signal: running.signal, onProgress });
    // Encoded here, the raw pixels (megabytes a job) never reach the service's thread, whose large heap
    // each such allocation would push towards a full garbage collection; only the files cross, copied.
    reply = { type: 'done', outputs: await renderOutputs(image, limitInputPixels) };
    onProgress(ENCODED);
  } catch (error) {
    reply = { type: 'failed', error: describeError(error) };
  } finally {
    running = undefined;
  }
  port.postMessage(reply);
}
