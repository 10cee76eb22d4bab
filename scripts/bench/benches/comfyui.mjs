/**
 * comfyui: the comfyui engine kind against the fake ComfyUI server (test/support/fake-comfyui.ts, through
 * testSupport), the service built and spawned as everywhere else.
 *
 * 1. Progress latency: from the fake's websocket `progress` message to the client's event stream carrying the item's
 *    new progress. The fake's sampler takes a second a step: below the service's limit of two a second per job, so
 *    no report is held back by it (a sampler faster than that has its steps merged, by design) and what is measured
 *    is the way from the worker's socket to the client.
 * 2. Throughput: a fake with 4 slots and 100 ms per prompt (40 prompts/s at most), `concurrency: 4` in the routing
 *    file, 200 jobs queued before the worker starts: jobs completed per second over the server's capacity.
 */
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { TextDecoderStream } from 'node:stream/web';
import {
  createBenchEnv,
  createUserWithKey,
  fmtMs,
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
  testSupport,
} from '../lib.mjs';

const PROGRESS_JOBS = 3;
const PROGRESS_STEPS = 6;
/** The fake's sampler step: slower than the service's limit of two progress events a second per job. */
const PROGRESS_STEP_MS = 1000;
const THROUGHPUT_JOBS = 200;
const SLOTS = 4;
const PROMPT_MS = 100;

export const description =
  'comfyui kind vs a fake ComfyUI: websocket progress to the client stream (p50), and jobs/s through 4 slots of 100 ms over the capacity';

export async function run() {
  const { img2imgRouting, startFakeComfy } = await testSupport();
  const env = await createBenchEnv();
  const agent = keepAliveAgent(64);
  const fake = await startFakeComfy({ steps: PROGRESS_STEPS, stepMs: PROGRESS_STEP_MS, nodeMs: 1, slots: SLOTS });
  try {
    const folder = join(env.dataDir, 'engines');
    await mkdir(join(folder, 'workflows'), { recursive: true });
    await copyFile(join(ROOT, 'docs/routing/workflows/img2img.json'), join(folder, 'workflows/img2img.json'));
    await writeFile(join(folder, 'engines.yaml'), img2imgRouting(fake.url, { concurrency: SLOTS }));
    const settings = {
      ENGINES_FILE: join(folder, 'engines.yaml'),
      // Three times the server's slots, as docs/engines.md advises for a model this fast: a job is ready the moment a
      // slot frees, while others still store their results.
      WORKER_CONCURRENCY: String(3 * SLOTS),
      ...NO_LIMITS,
    };
    const api = await env.startService({ ROLE: 'api', ...settings });
    const { authorization } = await createUserWithKey(env.databaseUrl);
    const photo = await makePhoto('product', 256, 256);
    const submit = async () => {
      const form = multipartBody({ tool: 'default', prompt: 'sharper', image: { data: photo, filename: 'image.jpg' } });
      const { status, json } = await postJob(agent, api.baseUrl, authorization, form);
      if (status !== 202) throw new Error(`job creation answered ${status}: ${JSON.stringify(json)}`);
      return json.history_item_id;
    };
    const promptOf = (id) => fake.prompts.find(({ prompt }) => String(prompt['2'].inputs.image).startsWith(id));

    // 1. Progress latency.
    const worker = await env.startService({ ROLE: 'worker', ...settings });
    const latencies = [];
    for (let i = 0; i < PROGRESS_JOBS; i++) {
      const id = await submit();
      const received = await progressEvents(`${api.baseUrl}/user/generation-history/${id}/events`, authorization);
      const { promptId } = promptOf(id);
      const sent = fake.progressSent.filter((message) => message.promptId === promptId);
      for (const at of received) {
        const cause = sent.filter((message) => message.at <= at).at(-1);
        if (cause) latencies.push(at - cause.at);
      }
    }
    const progress = summarize(latencies);
    log(`  progress events matched: ${progress.n} over ${PROGRESS_JOBS} jobs of ${PROGRESS_STEPS} steps`);
    record('comfyui', 'ws progress -> client stream, p50', progress.p50, fmtMs(progress.p50), {
      op: '<=',
      value: 30,
      text: '<= 30 ms',
    });
    await worker.stop();

    // 2. Throughput through 4 slots of 100 ms.
    Object.assign(fake.switches, { steps: 1, stepMs: PROMPT_MS - 2, nodeMs: 0 });
    const phaseStart = performance.now();
    const ids = [];
    for (let i = 0; i < THROUGHPUT_JOBS; i++) ids.push(await submit());
    await env.startService({ ROLE: 'worker', ...settings });
    const completedAt = [];
    for (const id of ids) {
      for (;;) {
        const { json: body } = await requestJson(agent, {
          url: `${api.baseUrl}/user/generation-history/${id}`,
          headers: { authorization, prefer: 'wait=30' },
        });
        if (body.status === 'complete') {
          completedAt.push(Date.parse(body.completed_at));
          break;
        }
        if (body.status !== 'pending') throw new Error(`job ${id} ended ${body.status}: ${JSON.stringify(body.error)}`);
      }
    }
    completedAt.sort((a, b) => a - b);
    // The middle 80% of completions: the worker's start and the last jobs' tail are not the steady state.
    const first = Math.floor(THROUGHPUT_JOBS * 0.1);
    const last = Math.ceil(THROUGHPUT_JOBS * 0.9) - 1;
    const rate = ((last - first) * 1000) / (completedAt[last] - completedAt[first]);
    // The server's own capacity: its slots over the time a prompt really ran (its timers and its own image work make
    // that a little more than PROMPT_MS).
    const ran = fake.prompts.filter((p) => p.startedAt >= phaseStart && p.endedAt !== undefined);
    const promptMs = ran.reduce((sum, p) => sum + (p.endedAt - p.startedAt), 0) / ran.length;
    const capacity = (SLOTS * 1000) / promptMs;
    log(
      `  ${rate.toFixed(1)} jobs/s against a capacity of ${capacity.toFixed(1)} prompts/s (${SLOTS} slots, prompts of ${promptMs.toFixed(1)} ms); most in flight ${fake.maxInFlight}`,
    );
    record(
      'comfyui',
      'jobs/s over the server’s capacity (4 slots of 100 ms prompts)',
      rate / capacity,
      `${(rate / capacity).toFixed(2)} (${rate.toFixed(1)} jobs/s)`,
      {
        op: '>=',
        value: 0.9,
        text: '>= 0.9',
      },
    );
  } finally {
    await fake.close();
    await env.dispose();
    agent.destroy();
  }
}

/** performance.now() of each event of the item's stream carrying a progress below 1, until the item is final. */
async function progressEvents(url, authorization) {
  const response = await fetch(url, { headers: { authorization, accept: 'text/event-stream' } });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const times = [];
  let buffer = '';
  let last;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return times;
      const now = performance.now();
      buffer += value;
      const lines = buffer.split('\n');
      buffer = lines.pop() ?? '';
      for (const line of lines) {
        if (!line.startsWith('data: ')) continue;
        const item = JSON.parse(line.slice('data: '.length));
        if (item.status !== 'pending') return times;
        if (typeof item.progress === 'number' && item.progress !== last && item.progress < 1) times.push(now);
        last = item.progress;
      }
    }
  } finally {
    await reader.cancel().catch(() => {});
    await sleep(0);
  }
}
