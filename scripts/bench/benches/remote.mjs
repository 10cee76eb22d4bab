/**
 * remote: what the service adds around a model server, measured against a stand-in GPU
 * (baselines/model-server.mjs: Cog's protocol, 100 ms a prediction, 4 at once) routed with the `cog` kind and
 * `concurrency: 4`. One API process and one worker; 1024 px inputs and outputs.
 *
 * 1. Throughput: jobs offered at 46/s, more than the server can take (4 / 100 ms = 40/s), so that its queue is never
 *    empty; after a 3 s warm-up, the jobs completed in a 12 s window (counted in the database afterwards, so that
 *    nothing watches the service while it works) against the server's own capacity. The service must never starve
 *    the GPU (>= 0.9).
 * 2. The service's own time per remote job, one job at a time: submit-to-client minus the model's 100 ms, p50,
 *    split into its parts: the upload's answer, from the item's creation to the model server receiving the
 *    prediction (queue, slot, inputs read, request sent), from the model's answer to the commit that completes the
 *    item (output decoded and verified, stock and preview encoded and stored), and from that commit to the client's
 *    stream event.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import {
  createBenchEnv,
  createUserWithKey,
  fmtMs,
  followUserEvents,
  keepAliveAgent,
  log,
  makePhoto,
  multipartBody,
  NO_LIMITS,
  postJob,
  record,
  requestJson,
  ROOT,
  sleep,
  summarize,
} from '../lib.mjs';

const MODEL_MS = 100;
const SLOTS = 4;
const OFFERED_PER_S = 46;
const SUBMITTERS = 8;
const WARMUP_MS = 3000;
export const WINDOW_MS = 12_000;
const SEQUENTIAL_JOBS = 25;

export const description =
  'remote engine: jobs/s through the service against a stand-in GPU (Cog protocol, 100 ms, 4 at once) at 1024 px, and the service’s own time per remote job with its parts';

export async function run() {
  const env = await createBenchEnv();
  const agent = keepAliveAgent(64);
  const {
    api,
    models: [model],
    authorization,
    form,
  } = await startStandInGpus(env, { servers: 1, slots: SLOTS, modelMs: MODEL_MS });

  const waiting = new Map();
  const finished = [];
  const closeStream = await followUserEvents(api.baseUrl, authorization, (item, receivedAt) => {
    if (item.status === 'pending') return;
    finished.push({ item, receivedAt });
    waiting.get(item.history_item_id)?.({ item, receivedAt });
  });
  const submit = async () => {
    const sentAt = Date.now();
    const post = await postJob(agent, api.baseUrl, authorization, form);
    if (post.status !== 202) throw new Error(`POST answered ${post.status} ${post.body}`);
    return { id: post.json.history_item_id, sentAt, acceptedAt: Date.now() };
  };
  const ended = (id) => new Promise((resolve) => waiting.set(id, resolve));

  try {
    // 2. One job at a time, after a warm-up (engine connection, first schema read).
    const parts = { upload: [], toModel: [], afterModel: [], toClient: [], own: [] };
    for (let i = 0; i < SEQUENTIAL_JOBS + 3; i++) {
      const { id, sentAt, acceptedAt } = await submit();
      const done = ended(id);
      const { item, receivedAt } = await done;
      if (item.status !== 'complete') throw new Error(`job ${id} ended ${item.status}: ${JSON.stringify(item.error)}`);
      if (i < 3) continue;
      const { json } = await requestJson(agent, { url: `${model.baseUrl}/log` });
      const run = json.log.find((entry) => entry.id === id);
      const createdAt = Date.parse(item.created_at);
      const completedAt = Date.parse(item.completed_at);
      parts.upload.push(acceptedAt - sentAt);
      parts.toModel.push(run.receivedAt - createdAt);
      parts.afterModel.push(completedAt - run.answeredAt);
      parts.toClient.push(receivedAt - completedAt);
      parts.own.push(receivedAt - sentAt - (run.answeredAt - run.receivedAt));
    }
    const p50 = (values) => summarize(values).p50;
    record(
      'remote',
      'service time per remote job (submit to client event, minus the model), p50',
      p50(parts.own),
      `${fmtMs(p50(parts.own))}: upload answered ${fmtMs(p50(parts.upload))}, created to model ${fmtMs(p50(parts.toModel))}, model answer to complete ${fmtMs(p50(parts.afterModel))}, complete to client ${fmtMs(p50(parts.toClient))}`,
    );

    // Nothing follows the jobs from here on: the count is taken afterwards.
    closeStream();

    // 1. Throughput with the queue never empty.
    const { submitted, counts, jobsPerSecond, served, predictionMs, capacity } = await throughput(env, agent, {
      models: [model],
      slots: SLOTS,
      offeredPerS: OFFERED_PER_S,
      submitters: SUBMITTERS,
      submit,
    });
    log(
      `  ${submitted} jobs submitted, ${counts.complete} complete in the ${WINDOW_MS / 1000} s window, ${counts.error} failed; ` +
        `the model server refused ${served[0].busyRefusals} predictions as busy (more than ${SLOTS} at once); ` +
        `its capacity ${capacity.toFixed(1)}/s (${SLOTS} slots, predictions of ${predictionMs.toFixed(1)} ms)`,
    );
    record(
      'remote',
      "jobs/s through the service / the model server's capacity (4 slots of 100 ms)",
      jobsPerSecond / capacity,
      `${(jobsPerSecond / capacity).toFixed(2)} (${jobsPerSecond.toFixed(1)} jobs/s)`,
      { op: '>=', value: 0.9, text: '>= 0.9' },
    );
  } finally {
    closeStream();
    await env.dispose();
  }
}

/**
 * Stand-in GPUs (`servers` of baselines/model-server.mjs, `slots` at once each, `modelMs` a prediction) behind one `cog`
 * engine (`url`, or `urls` for a pool) with `concurrency: slots`, routed `fashion_card`; one API process and one worker
 * with three times the slots in all as its concurrency, as docs/engines.md advises for a model this fast (a job is
 * ready the moment a slot frees, while others still store their results); a user, and a 1024 px job's form.
 */
export async function startStandInGpus(env, { servers, slots, modelMs }) {
  const models = await Promise.all(
    Array.from({ length: servers }, () =>
      env.startScript(join(ROOT, 'scripts/bench/baselines/model-server.mjs'), {
        MODEL_MS: String(modelMs),
        SLOTS: String(slots),
      }),
    ),
  );
  const urls = models.map((model) => model.baseUrl);
  const enginesFile = join(env.dataDir, 'engines.yaml');
  await writeFile(
    enginesFile,
    `engines:\n  gpu:\n    kind: cog\n    ${servers === 1 ? `url: ${urls[0]}` : `urls: [${urls.join(', ')}]`}\n` +
      `    concurrency: ${slots}\n    timeout: 1m\n` +
      'routes:\n  fashion_card:\n    engine: gpu\n    inputs: { clothes: image }\n',
  );
  const settings = {
    ENGINES_FILE: enginesFile,
    WORKER_CONCURRENCY: String(3 * servers * slots),
    ...NO_LIMITS,
  };
  const api = await env.startService({ ROLE: 'api', ...settings });
  await env.startService({ ROLE: 'worker', ...settings });
  const { authorization } = await createUserWithKey(env.databaseUrl);
  const clothes = await makePhoto('clothes', 1024, 1024);
  const form = multipartBody({ tool: 'fashion_card', clothes: { data: clothes, filename: 'clothes.jpg' } });
  return { api, models, authorization, form };
}

/**
 * Jobs offered at `offeredPerS` by `submitters` at once (more than the servers take, so that no queue is ever empty);
 * after a warm-up, the jobs completed in a window, counted in the database afterwards (so that nothing watches the
 * service while it works), against the servers' own capacity: their slots over the time a prediction really took
 * (timers run a little late), from their logs.
 */
export async function throughput(env, agent, { models, slots, offeredPerS, submitters: count, submit }) {
  let submitted = 0;
  let stop = false;
  const submitters = Array.from({ length: count }, async () => {
    while (!stop) {
      const next = sleep((count * 1000) / offeredPerS);
      await submit();
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
  const served = await Promise.all(
    models.map(async (model) => (await requestJson(agent, { url: `${model.baseUrl}/log` })).json),
  );
  const entries = served.flatMap((server) => server.log);
  const predictionMs = entries.reduce((sum, e) => sum + (e.answeredAt - e.receivedAt), 0) / entries.length;
  return {
    submitted,
    counts,
    jobsPerSecond: counts.complete / (WINDOW_MS / 1000),
    served,
    predictionMs,
    capacity: (models.length * slots * 1000) / predictionMs,
  };
}

/** Jobs that ended in the window, by status, from the items' own completion times. */
async function countEnded(databaseUrl, from, to) {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query(
      `SELECT count(*) FILTER (WHERE status = 'complete') AS complete, count(*) FILTER (WHERE status = 'error') AS error
         FROM history_items WHERE completed_at >= $1 AND completed_at < $2`,
      [from, to],
    );
    return { complete: Number(rows[0].complete), error: Number(rows[0].error) };
  } finally {
    await client.end();
  }
}
