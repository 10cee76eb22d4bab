/**
 * latency: submit-to-complete time at light load. ROLE=all with the default worker concurrency; one client
 * submits a fashion_card job (512x512 input) every 250 ms for 15 s (open loop: it does not wait for earlier
 * jobs) and polls each job every 20 ms. Latency = from the start of the POST to the first GET that answers
 * `complete`.
 *
 * For reading the figure, the same engine work is also timed in-process (LocalEngine + renderOutputs from
 * dist/), so the service's share of the latency can be told from the pipeline's. With BENCH_BEFORE, that revision's
 * service is measured the same way afterwards, in an environment of its own.
 */
import {
  benchBefore,
  createBenchEnv,
  createUserWithKey,
  fmtMs,
  fromDist,
  keepAliveAgent,
  log,
  makePhoto,
  multipartBody,
  NO_LIMITS,
  postJob,
  record,
  requestJson,
  sleep,
  summarize,
} from '../lib.mjs';

const INTERVAL_MS = 250;
const DURATION_MS = 15_000;
const POLL_MS = 20;
const JOB_TIMEOUT_MS = 30_000;
/** Warm-up jobs run two at a time, so that both engine threads (WORKER_CONCURRENCY 2) have compiled the pipeline. */
const WARMUP_PAIRS = 6;
const SIDE = 512;

export const description = `submit-to-complete p50/p99, one fashion_card job (${SIDE}x${SIDE}) every ${INTERVAL_MS} ms for ${DURATION_MS / 1000} s, ROLE=all`;

export async function run() {
  const clothes = await makePhoto('clothes', SIDE, SIDE);
  const form = multipartBody({ tool: 'fashion_card', clothes: { data: clothes, filename: 'clothes.jpg' } });
  const engineMs = await inProcessEngineMs(clothes);
  log(
    `  in-process LocalEngine.generate + renderOutputs for the same input: p50 ${fmtMs(engineMs.p50)} (min ${fmtMs(engineMs.min)})`,
  );

  const now = await submitToComplete(form);
  record('latency', 'submit-to-complete p50 (fashion_card 512 px, 4 jobs/s)', now.latency.p50, fmtMs(now.latency.p50), {
    op: '<=',
    value: 150,
    text: '<= 150 ms',
  });
  record('latency', 'submit-to-complete p99', now.latency.p99, fmtMs(now.latency.p99));
  record('latency', 'POST (job accepted) p50', now.accept.p50, fmtMs(now.accept.p50));
  record('latency', 'engine + render alone, in-process p50', engineMs.p50, fmtMs(engineMs.p50));
  const before = benchBefore();
  if (before) {
    // In an environment of its own: its worker must not take this build's jobs.
    const then = await submitToComplete(form, before.main);
    const ratio = now.latency.p50 / then.latency.p50;
    record(
      'latency',
      `submit-to-complete p50, this build / ${before.name} (BENCH_BEFORE)`,
      ratio,
      `${ratio.toFixed(2)} (${fmtMs(now.latency.p50)} vs ${fmtMs(then.latency.p50)})`,
    );
  }
}

/** The jobs' submit-to-complete times and POST times, on the built service or on the build whose `main` is given. */
async function submitToComplete(form, main) {
  const env = await createBenchEnv();
  const agent = keepAliveAgent(64);
  try {
    // The limits are raised so that no job is refused; the worker keeps its default concurrency.
    const service = await env.startService(
      {
        ROLE: 'all',
        ...NO_LIMITS,
      },
      { main },
    );
    const { authorization } = await createUserWithKey(env.databaseUrl);

    const submit = async () => {
      const started = performance.now();
      const post = await postJob(agent, service.baseUrl, authorization, form);
      const accepted = performance.now() - started;
      if (post.status !== 202) return { error: `POST ${post.status}` };
      const id = post.json.history_item_id;
      let polls = 0;
      while (performance.now() - started < JOB_TIMEOUT_MS) {
        const got = await requestJson(agent, {
          url: `${service.baseUrl}/user/generation-history/${id}`,
          headers: { Authorization: authorization },
        });
        polls++;
        if (got.status === 200 && got.json.status === 'complete') {
          return { ms: performance.now() - started, accepted, polls };
        }
        if (got.status !== 200 || got.json.status === 'error')
          return { error: `GET ${got.status} ${got.json?.status}` };
        await sleep(POLL_MS);
      }
      return { error: 'timeout' };
    };

    for (let i = 0; i < WARMUP_PAIRS; i++) await Promise.all([submit(), submit()]);

    const count = Math.floor(DURATION_MS / INTERVAL_MS);
    const t0 = performance.now();
    const jobs = [];
    for (let i = 0; i < count; i++) {
      const wait = t0 + i * INTERVAL_MS - performance.now();
      if (wait > 0) await sleep(wait);
      jobs.push(submit());
    }
    const outcomes = await Promise.all(jobs);
    const done = outcomes.filter((o) => o.ms !== undefined);
    const failed = outcomes.filter((o) => o.error);
    const latency = summarize(done.map((o) => o.ms));
    const accept = summarize(done.map((o) => o.accepted));
    const polls = summarize(done.map((o) => o.polls));
    log(
      `  ${main ? 'BENCH_BEFORE: ' : ''}${done.length}/${count} jobs complete; latency p50 ${fmtMs(latency.p50)} p90 ${fmtMs(latency.p90)} ` +
        `p99 ${fmtMs(latency.p99)} max ${fmtMs(latency.max)}; POST answered p50 ${fmtMs(accept.p50)} p99 ${fmtMs(accept.p99)}; ` +
        `polls per job p50 ${polls.p50}`,
    );
    if (failed.length > 0) log(`  failed: ${failed.map((o) => o.error).join(', ')}`);
    await service.stop();
    return { latency, accept };
  } finally {
    agent.destroy();
    await env.dispose();
  }
}

async function inProcessEngineMs(clothes) {
  const { LocalEngine } = await fromDist('engines/in-process.js');
  const { renderOutputs } = await fromDist('engines/index.js');
  const engine = new LocalEngine({ limitInputPixels: 40_000_000 });
  const times = [];
  for (let i = 0; i < 12; i++) {
    const started = performance.now();
    const result = await engine.generate({
      tool: 'fashion_card',
      generationType: 'product_card',
      images: { clothes },
      texts: {},
    });
    await renderOutputs(result, 40_000_000);
    if (i >= 2) times.push(performance.now() - started);
  }
  return summarize(times);
}
