/**
 * The entry point of a local-engine thread (see ThreadedLocalEngine): runs one job at a time on the
 * LocalEngine and answers with its raw result or a description of its error.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { type JobMessage, type ThreadMessage, type ThreadReply, describeError, errorFrom } from './engine-thread.protocol.js';
import { LocalEngine } from './local.engine.js';

const port = parentPort!;
const engine = new LocalEngine({ limitInputPixels: (workerData as { limitInputPixels: number }).limitInputPixels });
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
  let transfer: ArrayBuffer[] = [];
  try {
    // Buffers arrive as plain Uint8Arrays (structured cloning keeps the bytes, not the class).
    const images = Object.fromEntries(
      Object.entries(request.images).map(([name, bytes]) => [name, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)]),
    );
    const image = await engine.generate({ ...request, images, signal: running.signal });
    reply = { type: 'done', image };
    // A result that owns its whole memory moves to the service's thread instead of being copied (megabytes).
    const { buffer, byteOffset, byteLength } = image.data;
    if (byteOffset === 0 && byteLength === buffer.byteLength && buffer instanceof ArrayBuffer) transfer = [buffer];
  } catch (error) {
    reply = { type: 'failed', error: describeError(error) };
  } finally {
    running = undefined;
  }
  port.postMessage(reply, transfer);
}
