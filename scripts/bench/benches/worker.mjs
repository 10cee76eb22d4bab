/**
 * worker: steady-state throughput of a ROLE=worker process against the bare engine work. W + N fashion_swap
 * jobs (1024x1024 inputs) are queued through the API (ROLE=api, which is then stopped), then a worker is
 * started; the first W jobs warm it up (the engines' pixel loops are compiled by V8 as they run, which takes
 * some jobs), and it is timed from the W-th item written complete to the last. Baseline: an in-process loop
 * running LocalEngine.generate + renderOutputs from dist/ on the same inputs with the same concurrency as
 * WORKER_CONCURRENCY, timed the same way after the same warm-up, in a fresh process like the worker.
 *
 * The worker's boot and the time to its first job are printed apart. Both sides run twice, alternating;
 * the best round of each is compared.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import {
  cpuMs,
  createBenchEnv,
  createUserWithKey,
  fmtMs,
  keepAliveAgent,
  log,
  makePhoto,
  multipartBody,
  NO_LIMITS,
  record,
  request,
  sleep,
} from '../lib.mjs';

const JOBS = 40;
const WARMUP_JOBS = 10;
const CONCURRENCY = 2; // the service's default WORKER_CONCURRENCY, set explicitly for both sides
const SIDE = 1024;
const TIMEOUT_MS = 180_000;
const ROUNDS = 2;

export const description = `${WARMUP_JOBS} + ${JOBS} fashion_swap jobs (${SIDE}x${SIDE}): ROLE=worker jobs/s vs in-process LocalEngine + renderOutputs, concurrency ${CONCURRENCY}`;

export async function run() {
  const [clothes, person] = await Promise.all([makePhoto('clothes', SIDE, SIDE), makePhoto('person', SIDE, SIDE)]);
  const form = multipartBody({
    tool: 'fashion_swap',
    clothes: { data: clothes, filename: 'clothes.jpg' },
    person: { data: person, filename: 'person.jpg' },
  });

  const env = await createBenchEnv();
  const redis = new Redis(env.redisUrl);
  const db = new pg.Client({ connectionString: env.databaseUrl });
  try {
    const baselines = [];
    const workers = [];
    const baselineCpu = [];
    const workerCpu = [];
    let authorization;
    // The two sides alternate, twice, and the best round of each counts: other work on the machine only
    // ever slows a round down, so the best one is the closest to the real cost.
    for (let round = 1; round <= ROUNDS; round++) {
      const baseline = await engineLoop(env);
      baselines.push(baseline.jobsPerSecond);
      baselineCpu.push(baseline.cpuMsPerJob);
      log(
        `  round ${round}, in-process engine: ${JOBS} jobs in ${(baseline.ms / 1000).toFixed(2)} s = ${baseline.jobsPerSecond.toFixed(2)} jobs/s`,
      );

      // Queue N jobs through the API, then stop it so the worker has the machine.
      const api = await env.startService({
        ROLE: 'api',
        ...NO_LIMITS,
      });
      authorization ??= (await createUserWithKey(env.databaseUrl)).authorization;
      const agent = keepAliveAgent(4);
      for (let i = 0; i < WARMUP_JOBS + JOBS; i++) {
        const { status, body } = await request(agent, {
          url: `${api.baseUrl}/generation/generate_image_v2/`,
          method: 'POST',
          headers: { Authorization: authorization, 'Content-Type': form.contentType },
          body: form.body,
        });
        if (status !== 202) throw new Error(`job ${i} refused: ${status} ${body}`);
      }
      agent.destroy();
      await api.stop();
      if (round === 1) await db.connect();

      const worker = await timeWorker(env, redis, db, (WARMUP_JOBS + JOBS) * (round - 1));
      workers.push(worker.jobsPerSecond);
      workerCpu.push(worker.cpuMsPerJob);
      log(
        `  round ${round}, worker: boot to first active job ${fmtMs(worker.bootMs)}; ${JOBS} jobs in ${(worker.workMs / 1000).toFixed(2)} s = ` +
          `${worker.jobsPerSecond.toFixed(2)} jobs/s after ${WARMUP_JOBS} warm-up jobs (${worker.withBoot.toFixed(2)} jobs/s for all, counting boot)`,
      );
    }

    const best = (values) => Math.max(...values);
    const workerBest = best(workers);
    const baselineBest = best(baselines);
    const ratio = workerBest / baselineBest;
    const rounds = (values) => values.map((v) => v.toFixed(2)).join(', ');
    record(
      'worker',
      `worker jobs/s (${JOBS} fashion_swap 1024 px, c=${CONCURRENCY}), best of ${ROUNDS}`,
      workerBest,
      `${workerBest.toFixed(2)} jobs/s (rounds: ${rounds(workers)})`,
    );
    record(
      'worker',
      `in-process engine + render jobs/s, best of ${ROUNDS}`,
      baselineBest,
      `${baselineBest.toFixed(2)} jobs/s (rounds: ${rounds(baselines)})`,
    );
    const mean = (values) => values.reduce((a, b) => a + b, 0) / values.length;
    record(
      'worker',
      'CPU per job, worker process vs in-process (info)',
      mean(workerCpu),
      `${fmtMs(mean(workerCpu))} vs ${fmtMs(mean(baselineCpu))} (ratio ${(mean(baselineCpu) / mean(workerCpu)).toFixed(2)}; PostgreSQL/Redis not included)`,
    );
    record('worker', 'worker / in-process throughput', ratio, ratio.toFixed(2), {
      op: '>=',
      value: 0.8,
      text: '>= 0.8',
    });
  } finally {
    redis.disconnect();
    await db.end().catch(() => {});
    await env.dispose();
  }
}

/**
 * Starts a worker and times it from the moment `before + WARMUP_JOBS` items are final until
 * `before + WARMUP_JOBS + JOBS` are.
 */
async function timeWorker(env, redis, db, before) {
  const spawned = performance.now();
  // Watched from the spawn on, not from its readiness: the worker takes jobs as soon as it is connected.
  let worker;
  let startFailure;
  const starting = env.startService({ ROLE: 'worker', WORKER_CONCURRENCY: String(CONCURRENCY) }).then(
    (service) => (worker = service),
    (error) => (startFailure = error),
  );
  const activeKey = `${env.redisPrefix}:bull:generation:active`;
  let firstActive;
  let warm;
  let done;
  let cpuAtWarm;
  let cpuAtDone;
  let finished = 0;
  const deadline = Date.now() + TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (startFailure) throw startFailure;
    if (worker?.process.exitCode != null) throw new Error(`worker exited:\n${worker.output()}`);
    if (firstActive === undefined && (await redis.llen(activeKey)) > 0) firstActive = performance.now();
    const { rows } = await db.query(
      `SELECT count(*) FILTER (WHERE status <> 'pending')::int AS finished,
              count(*) FILTER (WHERE status = 'error')::int AS failed
         FROM history_items`,
    );
    finished = rows[0].finished - before;
    if (warm === undefined && finished >= WARMUP_JOBS) {
      warm = { at: performance.now(), finished };
      await starting;
      if (startFailure) throw startFailure;
      cpuAtWarm = cpuMs(worker.pid);
    }
    if (finished >= WARMUP_JOBS + JOBS) {
      done = performance.now();
      cpuAtDone = cpuMs(worker.pid);
      if (rows[0].failed > 0) log(`  warning: ${rows[0].failed} jobs ended in error`);
      break;
    }
    await sleep(firstActive === undefined ? 5 : 10);
  }
  await starting;
  await worker?.stop();
  if (done === undefined) {
    throw new Error(`the worker finished ${finished}/${WARMUP_JOBS + JOBS} jobs in ${TIMEOUT_MS / 1000} s`);
  }
  // Jobs finished between the poll that saw the warm-up end and that moment count in the window.
  const timed = WARMUP_JOBS + JOBS - warm.finished;
  const workMs = done - warm.at;
  return {
    bootMs: (firstActive ?? warm.at) - spawned,
    workMs,
    jobsPerSecond: timed / (workMs / 1000),
    withBoot: (WARMUP_JOBS + JOBS) / ((done - spawned) / 1000),
    cpuMsPerJob: (cpuAtDone - cpuAtWarm) / timed,
  };
}

/**
 * The same work without the service: CONCURRENCY loops pulling from one counter, as Bull's processor does,
 * in a fresh process (baselines/engine-loop.mjs), timed after the same warm-up.
 */
async function engineLoop(env) {
  const loop = await env.runScript(new URL('../baselines/engine-loop.mjs', import.meta.url).pathname, {
    JOBS: String(JOBS),
    WARMUP_JOBS: String(WARMUP_JOBS),
    CONCURRENCY: String(CONCURRENCY),
    SIDE: String(SIDE),
  });
  return JSON.parse(loop.stdout.trim().split('\n').pop());
}
