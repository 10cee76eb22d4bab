/**
 * Baseline for the `worker` bench: the engine work of a job without the service around it. In a fresh
 * process like a worker, CONCURRENCY loops pull from one counter (as Bull's processor does) and run
 * LocalEngine.generate + renderOutputs from dist/ on fashion_swap inputs of SIDE px: WARMUP_JOBS untimed
 * jobs, then JOBS timed ones. Prints one JSON line: { ms, jobsPerSecond, cpuMsPerJob }.
 *
 * Env: JOBS, WARMUP_JOBS, CONCURRENCY, SIDE.
 */
import { fromDist, makePhoto } from '../lib.mjs';

const JOBS = Number(process.env.JOBS);
const WARMUP_JOBS = Number(process.env.WARMUP_JOBS);
const CONCURRENCY = Number(process.env.CONCURRENCY);
const SIDE = Number(process.env.SIDE);

const [clothes, person] = await Promise.all([makePhoto('clothes', SIDE, SIDE), makePhoto('person', SIDE, SIDE)]);
const { LocalEngine } = await fromDist('engines/in-process.js');
const { renderOutputs } = await fromDist('engines/index.js');
const engine = new LocalEngine({ limitInputPixels: 40_000_000 });

async function run(count) {
  let next = 0;
  const loop = async () => {
    while (next < count) {
      next++;
      const result = await engine.generate({
        tool: 'fashion_swap',
        generationType: 'fashion_swap_full',
        images: { clothes, person },
        texts: {},
      });
      await renderOutputs(result, 40_000_000);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, loop));
}

await run(WARMUP_JOBS);
const cpuBefore = process.cpuUsage();
const started = performance.now();
await run(JOBS);
const ms = performance.now() - started;
const cpu = process.cpuUsage(cpuBefore);
console.log(
  JSON.stringify({ ms, jobsPerSecond: JOBS / (ms / 1000), cpuMsPerJob: (cpu.user + cpu.system) / 1000 / JOBS }),
);
process.exit(0);
