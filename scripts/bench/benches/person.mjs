/**
 * person: the person tools' models. A try-on's engine time on a 1024 px portrait (test/fixtures/photos/astronaut.jpg
 * enlarged) against the two models' share of it; the models' load time on a fresh thread; one engine thread's RSS;
 * and what the models add to an install: the TensorFlow.js packages (with everything they pull in) and models/.
 * The worker's throughput with the models in the job is the `worker` bench's.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, fmtMs, log, percentile, record, runScript } from '../lib.mjs';

const JOBS = 20;
const WARMUP_JOBS = 5;
const MODEL_PACKAGES = ['@tensorflow/tfjs-core', '@tensorflow/tfjs-converter', '@tensorflow/tfjs-backend-wasm'];

export const description = `fashion_swap_half upper on a 1024 px portrait (${JOBS} jobs): engine and model times, model load, thread RSS, install size`;

export async function run() {
  const { stdout } = await runScript(join(ROOT, 'scripts/bench/baselines/person-engine.mjs'), {
    JOBS: String(JOBS),
    WARMUP_JOBS: String(WARMUP_JOBS),
    // RSS is read after a full collection, so it counts what the thread keeps, not garbage not yet collected.
    NODE_OPTIONS: '--expose-gc',
  });
  const { loadMs, threadRssMb, engineMs, modelsMs } = JSON.parse(stdout.trim().split('\n').pop());
  const engineP50 = percentile(engineMs, 50);
  const modelsP50 = percentile(modelsMs, 50);
  record('person', 'person tool engine time p50, 1024 px portrait', engineP50, fmtMs(engineP50), {
    op: '<=',
    value: 300,
    text: '<= 300 ms',
  });
  record(
    'person',
    'the two models alone / the whole try-on (p50)',
    modelsP50 / engineP50,
    `${fmtMs(modelsP50)} / ${fmtMs(engineP50)} = ${(modelsP50 / engineP50).toFixed(2)}`,
  );
  record('person', 'models loaded on a fresh engine thread', loadMs, fmtMs(loadMs), {
    op: '<=',
    value: 2000,
    text: '<= 2 s',
  });
  record('person', `RSS of one engine thread after ${JOBS} try-ons`, threadRssMb, `${threadRssMb.toFixed(0)} MB`, {
    op: '<=',
    value: 250,
    text: '<= 250 MB',
  });
  const installMb = installGrowthMb();
  record(
    'person',
    'install growth: TensorFlow.js packages and their dependencies + models/',
    installMb,
    `${installMb.toFixed(0)} MB`,
    {
      op: '<=',
      value: 120,
      text: '<= 120 MB',
    },
  );
}

/** On-disk size of MODEL_PACKAGES and every package only they bring in (read from package-lock.json), and models/. */
function installGrowthMb() {
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')).packages;
  const requiredBy = new Map();
  for (const [path, entry] of Object.entries(lock)) {
    for (const dependency of Object.keys({ ...entry.dependencies, ...entry.optionalDependencies })) {
      const key = `node_modules/${dependency}`;
      requiredBy.set(key, [...(requiredBy.get(key) ?? []), path]);
    }
  }
  const brought = new Set(MODEL_PACKAGES.map((name) => `node_modules/${name}`));
  let grew = true;
  while (grew) {
    grew = false;
    for (const [key, parents] of requiredBy) {
      if (!brought.has(key) && key in lock && parents.every((parent) => brought.has(parent))) {
        brought.add(key);
        grew = true;
      }
    }
  }
  const paths = [...brought, 'models'].map((path) => join(ROOT, path));
  const kb = execFileSync('du', ['-skc', ...paths], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .pop()
    .split('\t')[0];
  log(`  install growth counts: ${[...brought].map((path) => path.replace('node_modules/', '')).join(', ')}, models/`);
  return Number(kb) / 1024;
}
