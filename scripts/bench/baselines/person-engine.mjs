/**
 * The `person` bench's measurements, in a fresh process like a worker's (printed as one JSON line):
 * - loadMs: the person models loaded on a new thread, from its start (as an engine thread starts loading them);
 * - threadRssMb: the process's RSS growth from one engine thread (ThreadedLocalEngine, 1 thread) that loaded the
 *   models and ran JOBS try-ons, after a garbage collection;
 * - engineMs / modelsMs: per-job times (sorted) of `fashion_swap_half` upper on the 1024 px portrait (LocalEngine
 *   in this thread, after WARMUP_JOBS) and of the two models alone on the decoded portrait.
 *
 * Env: JOBS, WARMUP_JOBS.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import sharp from 'sharp';
import { DIST, ROOT, fromDist } from '../lib.mjs';

const JOBS = Number(process.env.JOBS);
const WARMUP_JOBS = Number(process.env.WARMUP_JOBS);

const portrait = await sharp(await readFile(join(ROOT, 'test/fixtures/photos/astronaut.jpg')))
  .resize(1024, 1024, { kernel: 'lanczos3' })
  .jpeg({ quality: 90 })
  .toBuffer();
const clothes = await readFile(join(ROOT, 'docs/examples/fashion_swap_half-upper/input-clothes.jpg'));
const request = {
  tool: 'fashion_swap_half',
  generationType: 'upper',
  images: { clothes, person: portrait },
  texts: {},
};

const loadMs = await new Promise((resolve, reject) => {
  const model = pathToFileURL(join(DIST, 'engines/in-process.js')).href;
  const thread = new Worker(
    `const started = performance.now();
     import(${JSON.stringify(model)})
       .then((m) => m.personModels())
       .then(() => require('node:worker_threads').parentPort.postMessage(performance.now() - started));`,
    { eval: true },
  );
  thread.once('message', (ms) => thread.terminate().then(() => resolve(ms)));
  thread.once('error', reject);
});

const { ThreadedLocalEngine } = await fromDist('engines/index.js');
const { LocalEngine, analysePerson } = await fromDist('engines/in-process.js');
const { decodeImage } = await fromDist('engines/index.js');

globalThis.gc();
const rssBefore = process.memoryUsage().rss;
const threaded = new ThreadedLocalEngine(1, 40_000_000);
for (let i = 0; i < JOBS; i++) await threaded.generate(request);
globalThis.gc();
const threadRssMb = (process.memoryUsage().rss - rssBefore) / 1e6;
await threaded.close();

const engine = new LocalEngine();
const time = async (work) => {
  for (let i = 0; i < WARMUP_JOBS; i++) await work();
  const times = [];
  for (let i = 0; i < JOBS; i++) {
    const started = performance.now();
    await work();
    times.push(performance.now() - started);
  }
  return times.sort((a, b) => a - b);
};
const person = await decodeImage(portrait, 'person', { alpha: false });
const engineMs = await time(() => engine.generate(request));
const modelsMs = await time(() => analysePerson(person));
console.log(JSON.stringify({ loadMs, threadRssMb, engineMs, modelsMs }));
process.exit(0);
