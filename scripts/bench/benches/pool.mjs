/**
 * pool: jobs/s through a pool of model servers against the pool's capacity, as `remote` measures one server. Three
 * stand-in GPUs (baselines/model-server.mjs: Cog's protocol, 100 ms a prediction, 2 at once each) named by one
 * engine's `urls` with `concurrency: 2`; one API process and one worker; 1024 px inputs and outputs. Jobs are offered
 * at 69/s, more than the pool takes (3 x 2 / 100 ms = 60/s), so that no server's queue is ever empty; after a 3 s
 * warm-up, the jobs completed in a 12 s window (counted in the database afterwards) against the pool's own capacity.
 * A job waits for a slot of the pool and runs on the server with the most free slots: the service must keep every
 * server busy (>= 0.9), none refusing a prediction as busy.
 */
import { keepAliveAgent, log, postJob, record, createBenchEnv } from '../lib.mjs';
import { startStandInGpus, throughput, WINDOW_MS } from './remote.mjs';

const MODEL_MS = 100;
const SERVERS = 3;
const SLOTS = 2;
const OFFERED_PER_S = 69;
const SUBMITTERS = 12;

export const description =
  'pool of model servers: jobs/s through the service against three stand-in GPUs (Cog protocol, 100 ms, 2 at once each) behind one engine';

export async function run() {
  const env = await createBenchEnv();
  const agent = keepAliveAgent(64);
  try {
    const { api, models, authorization, form } = await startStandInGpus(env, {
      servers: SERVERS,
      slots: SLOTS,
      modelMs: MODEL_MS,
    });
    const submit = async () => {
      const post = await postJob(agent, api.baseUrl, authorization, form);
      if (post.status !== 202) throw new Error(`POST answered ${post.status} ${post.body}`);
    };
    const { submitted, counts, jobsPerSecond, served, predictionMs, capacity } = await throughput(env, agent, {
      models,
      slots: SLOTS,
      offeredPerS: OFFERED_PER_S,
      submitters: SUBMITTERS,
      submit,
    });
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
