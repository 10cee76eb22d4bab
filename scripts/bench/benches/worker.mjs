/**
 * worker: throughput of a ROLE=worker process against the bare engine work. N fashion_swap jobs (1024x1024
 * inputs) are queued through the API (ROLE=api, which is then stopped), then a worker is started and timed
 * until every item is complete. Baseline: an in-process loop running LocalEngine.generate + renderOutputs
 * from dist/ on the same N inputs with the same concurrency as WORKER_CONCURRENCY.
 *
 * The worker's time runs from its first job turning active (seen in Bull's active list) to the last item
 * written complete, so its boot (printed apart) is not counted. Both sides run twice, alternating; the best
 * round of each is compared.
 */
import { Redis } from 'ioredis';
import pg from 'pg';
import {
  createBenchEnv,
  cpuMs,
  createUserWithKey,
  fmtMs,
  fromDist,
  keepAliveAgent,
  log,
  makePhoto,
  multipartBody,
  record,
  REDIS_URL,
  request,
  sleep,
} from '../lib.mjs';

const JOBS = 40;
const CONCURRENCY = 2; // the service's default WORKER_CONCURRENCY, set explicitly for both sides
const SIDE = 1024;
const TIMEOUT_MS = 180_000;
const ROUNDS = 2;

export const description = `${JOBS} fashion_swap jobs (${SIDE}x${SIDE}): ROLE=worker jobs/s vs in-process LocalEngine + renderOutputs, concurrency ${CONCURRENCY}`;

export async function run() {
  const [clothes, person] = await Promise.all([makePhoto('clothes', SIDE, SIDE), makePhoto('person', SIDE, SIDE)]);
  const form = multipartBody({
    tool: 'fashion_swap',
    clothes: { data: clothes, filename: 'clothes.jpg' },
    person: { data: person, filename: 'person.jpg' },
  });

  const env = await createBenchEnv('worker');
  const redis = new Redis(REDIS_URL);
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
      const baseline = await engineLoop({ clothes, person });
      baselines.push(baseline.jobsPerSecond);
      baselineCpu.push(baseline.cpuMsPerJob);
      log(`  round ${round}, in-process engine: ${JOBS} jobs in ${(baseline.ms / 1000).toFixed(2)} s = ${baseline.jobsPerSecond.toFixed(2)} jobs/s`);

      // Queue N jobs through the API, then stop it so the worker has the machine.
      const api = await env.startService({ ROLE: 'api', LIMIT_MAX_PENDING: '1000000', LIMIT_CREATIONS_PER_MINUTE: '1000000' });
      authorization ??= (await createUserWithKey(env.databaseUrl)).authorization;
      const agent = keepAliveAgent(4);
      for (let i = 0; i < JOBS; i++) {
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

      const worker = await timeWorker(env, redis, db, JOBS * round);
      workers.push(worker.jobsPerSecond);
      workerCpu.push(worker.cpuMsPerJob);
      log(
        `  round ${round}, worker: boot to first active job ${fmtMs(worker.bootMs)}; ${JOBS} jobs in ${(worker.workMs / 1000).toFixed(2)} s = ` +
          `${worker.jobsPerSecond.toFixed(2)} jobs/s (${worker.withBoot.toFixed(2)} jobs/s counting boot)`,
      );
    }

    const best = (values) => Math.max(...values);
    const workerBest = best(workers);
    const baselineBest = best(baselines);
    const ratio = workerBest / baselineBest;
    const rounds = (values) => values.map((v) => v.toFixed(2)).join(', ');
    record('worker', `worker jobs/s (${JOBS} fashion_swap 1024 px, c=${CONCURRENCY}), best of ${ROUNDS}`, workerBest, `${workerBest.toFixed(2)} jobs/s (rounds: ${rounds(workers)})`);
    record('worker', `in-process engine + render jobs/s, best of ${ROUNDS}`, baselineBest, `${baselineBest.toFixed(2)} jobs/s (rounds: ${rounds(baselines)})`);
    const mean = (values) => values.reduce((a, b) => a + b, 0) / values.length;
    record(
      'worker',
      'CPU per job, worker process vs in-process (info)',
      mean(workerCpu),
      `${fmtMs(mean(workerCpu))} vs ${fmtMs(mean(baselineCpu))} (ratio ${(mean(baselineCpu) / mean(workerCpu)).toFixed(2)}; PostgreSQL/Redis not included)`,
    );
    record('worker', 'worker / in-process throughput', ratio, ratio.toFixed(2), { op: '>=', value: 0.8, text: '>= 0.8' });
  } finally {
    redis.disconnect();
    await db.end().catch(() => {});
    await env.dispose();
  }
}

/** Starts a worker and times it from its first active job until `finishedTarget` items are final. */
async function timeWorker(env, redis, db, finishedTarget) {
  const spawned = performance.now();
  const worker = await env.startService({ ROLE: 'worker', WORKER_CONCURRENCY: String(CONCURRENCY) }, { wait: false });
  const activeKey = `${env.redisPrefix}:bull:generation:active`;
  let firstActive;
  let done;
  let cpuAtFirst;
  let cpuAtDone;
  let finished = 0;
  const deadline = Date.now() + TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (worker.child.exitCode !== null) throw new Error(`worker exited:\n${worker.output()}`);
    if (firstActive === undefined && (await redis.llen(activeKey)) > 0) {
      firstActive = performance.now();
      cpuAtFirst = cpuMs(worker.pid);
    }
    const { rows } = await db.query(
      `SELECT count(*) FILTER (WHERE status <> 'pending')::int AS finished,
              count(*) FILTER (WHERE status = 'error')::int AS failed
         FROM history_items`,
    );
    finished = rows[0].finished;
    if (finished > finishedTarget - JOBS && firstActive === undefined) {
      firstActive = performance.now(); // missed between polls
      cpuAtFirst = cpuMs(worker.pid);
    }
    if (finished >= finishedTarget) {
      done = performance.now();
      cpuAtDone = cpuMs(worker.pid);
      if (rows[0].failed > 0) log(`  warning: ${rows[0].failed} jobs ended in error`);
      break;
    }
    await sleep(firstActive === undefined ? 5 : 20);
  }
  await worker.ready.catch(() => {});
  await worker.stop();
  if (done === undefined) throw new Error(`the worker finished ${finished}/${finishedTarget} jobs in ${TIMEOUT_MS / 1000} s`);
  const workMs = done - firstActive;
  return {
    bootMs: firstActive - spawned,
    workMs,
    jobsPerSecond: JOBS / (workMs / 1000),
    withBoot: JOBS / ((done - spawned) / 1000),
    cpuMsPerJob: (cpuAtDone - cpuAtFirst) / JOBS,
  };
}

/** N jobs' engine work with CONCURRENCY loops pulling from one counter, as Bull's processor does. */
async function engineLoop(images) {
  const { LocalEngine } = await fromDist('worker/engines/local/index.js');
  const { renderOutputs } = await fromDist('worker/renderer.js');
  const engine = new LocalEngine({ limitInputPixels: 40_000_000 });
  let next = 0;
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  const loop = async () => {
    while (next < JOBS) {
      next++;
      const result = await engine.generate({ tool: 'fashion_swap', generationType: 'fashion_swap_full', images, texts: {} });
      await renderOutputs(result, 40_000_000);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, loop));
  const ms = performance.now() - started;
  const cpu = process.cpuUsage(cpuBefore);
  return { ms, jobsPerSecond: JOBS / (ms / 1000), cpuMsPerJob: (cpu.user + cpu.system) / 1000 / JOBS };
}
