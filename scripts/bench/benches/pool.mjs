/**
 * pool: jobs/s through a pool of model servers against the pool's capacity, as `remote` measures one server. Three
 * stand-in GPUs (baselines/model-server.mjs: Cog's protocol, 100 ms a prediction, 2 at once each) named by one
 * engine's `urls` with `concurrency: 2`; one API process and one worker; 1024 px inputs and outputs. Jobs are offered
 * at 69/s, more than the pool takes (3 x 2 / 100 ms = 60/s), so that no server's queue is ever empty; after a 3 s
 * warm-up, the jobs completed in a 12 s window (counted in the database afterwards) against the pool's own capacity.
 * A job waits for a slot of the pool and runs on the server with the most free slots: the service must keep every
 * server busy (>= 0.9), none refusing a prediction as busy.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  createBenchEnv,
  createUserWithKey,
  keepAliveAgent,
  log,
  makePhoto,
  multipartBody,
  record,
  postJob,
  requestJson,
  ROOT,
  sleep,
} from '../lib.mjs';
import { countEnded } from './remote.mjs';

const MODEL_MS = 100;
const SERVERS = 3;
const SLOTS = 2;
const OFFERED_PER_S = 69;
const SUBMITTERS = 12;
const WARMUP_MS = 3000;
const WINDOW_MS = 12_000;

export const description =
  'pool of model servers: jobs/s through the service against three stand-in GPUs (Cog protocol, 100 ms, 2 at once each) behind one engine';

export async function run() {
  const env = await createBenchEnv();
  const agent = keepAliveAgent(64);
  const models = await Promise.all(
    Array.from({ length: SERVERS }, () =>
      env.startScript(join(ROOT, 'scripts/bench/baselines/model-server.mjs'), {
        MODEL_MS: String(MODEL_MS),
        SLOTS: String(SLOTS),
      }),
    ),
  );
  const enginesFile = join(env.dataDir, 'engines.yaml');
  await writeFile(
    enginesFile,
    `engines:\n  gpu:\n    kind: cog\n    urls: [${models.map((model) => model.baseUrl).join(', ')}]\n` +
      `    concurrency: ${SLOTS}\n    timeout: 1m\n` +
      'routes:\n  fashion_card:\n    engine: gpu\n    inputs: { clothes: image }\n',
  );
  const settings = {
    ENGINES_FILE: enginesFile,
    // Three times the pool's slots, as `remote` holds for one server.
    WORKER_CONCURRENCY: String(3 * SERVERS * SLOTS),
    LIMIT_MAX_PENDING: '1000000',
    LIMIT_CREATIONS_PER_MINUTE: '1000000',
    LIMIT_CONCURRENT_UPLOADS: '1000000',
    LIMIT_EVENT_STREAMS: '1000000',
    LIMIT_HELD_REQUESTS: '1000000',
  };
  const api = await env.startService({ ROLE: 'api', ...settings });
  await env.startService({ ROLE: 'worker', ...settings });
  const { authorization } = await createUserWithKey(env.databaseUrl);
  const clothes = await makePhoto('clothes', 1024, 1024);
  const form = multipartBody({ tool: 'fashion_card', clothes: { data: clothes, filename: 'clothes.jpg' } });

  try {
    let submitted = 0;
    let stop = false;
    const submitters = Array.from({ length: SUBMITTERS }, async () => {
      while (!stop) {
        const next = sleep((SUBMITTERS * 1000) / OFFERED_PER_S);
        const post = await postJob(agent, api.baseUrl, authorization, form);
        if (post.status !== 202) throw new Error(`POST answered ${post.status} ${post.body}`);
        submitted++;
        await next;
      }
    });
    await sleep(WARMUP_MS);
    const windowStart = new Date();
    await sleep(WINDOW_MS);
    const windowEnd = new Date();
    stop = true;
    await Promise.all(submitters);
    const counts = await countEnded(env.databaseUrl, windowStart, windowEnd);
    const jobsPerSecond = counts.complete / (WINDOW_MS / 1000);
    const served = await Promise.all(
      models.map(async (model) => (await requestJson(agent, { url: `${model.baseUrl}/log` })).json),
    );
    // The pool's own capacity: its slots over the time a prediction really took (timers run a little late).
    const entries = served.flatMap((server) => server.log);
    const predictionMs = entries.reduce((sum, e) => sum + (e.answeredAt - e.receivedAt), 0) / entries.length;
    const capacity = (SERVERS * SLOTS * 1000) / predictionMs;
    log(
      `  ${submitted} jobs submitted, ${counts.complete} complete in the ${WINDOW_MS / 1000} s window, ${counts.error} failed; ` +
        `predictions per server ${served.map((server) => server.log.length).join(' / ')}, ` +
        `refused as busy ${served.reduce((sum, server) => sum + server.busyRefusals, 0)}; ` +
        `the pool's capacity ${capacity.toFixed(1)}/s (${SERVERS} servers of ${SLOTS} slots, predictions of ${predictionMs.toFixed(1)} ms)`,
    );
    record(
      'pool',
      "jobs/s through the service / the pool's capacity (3 servers of 2 slots of 100 ms)",
      jobsPerSecond / capacity,
      `${(jobsPerSecond / capacity).toFixed(2)} (${jobsPerSecond.toFixed(1)} jobs/s)`,
      { op: '>=', value: 0.9, text: '>= 0.9' },
    );
  } finally {
    await env.dispose();
  }
}
