import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import sharp from 'sharp';
import { Client, createJob, type HistoryItemBody, waitForFinal } from '../../support/client.js';
import { openStream } from '../../support/event-stream.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { img2imgRouting, startFakeComfy, type FakeComfy } from '../../support/fake-comfyui.js';
import {
  completionsTried,
  createUser,
  expectCompleteWithOutputs,
  failNextCompletions,
  Processes,
  waitUntil,
} from '../../support/harness.js';
import { makeImage } from '../../support/jobs.js';
import type { RunningService } from '../../support/service.js';

const WORKFLOW = new URL('../../../docs/routing/workflows/img2img.json', import.meta.url);

/** The item's `progress` in each event of its stream, from creation to its final event. */
async function streamedProgress(baseUrl: string, key: string, id: string): Promise<(number | null)[]> {
  const stream = await openStream(`${baseUrl}/user/generation-history/${id}/events`, key);
  expect(stream.status).toBe(200);
  await stream.ended;
  return stream.events.map((event) => (event.data as HistoryItemBody).progress);
}

describe('the comfyui engine kind in the built service', () => {
  let env: TestEnvironment;
  let processes: Processes;
  let fake: FakeComfy;
  let api: RunningService;
  let key: string;
  let serviceEnv: Record<string, string>;
  let images = 0;

  async function submit(): Promise<{ id: string; image: Buffer }> {
    images++;
    const image = await makeImage(200 + images * 8, 160, 'png');
    const id = await createJob(api.baseUrl, key, {
      tool: 'default',
      prompt: 'a sharper photo',
      image: { data: image, filename: 'image.png', contentType: 'image/png' },
    });
    return { id, image };
  }

  const promptsOf = (id: string) =>
    fake.prompts.filter(({ prompt }) => String(prompt['2'].inputs.image).startsWith(id));

  beforeAll(async () => {
    env = await createTestEnvironment();
    fake = await startFakeComfy({ steps: 8, stepMs: 300 });
    const folder = join(env.dataDir, 'engines');
    await mkdir(join(folder, 'workflows'), { recursive: true });
    await copyFile(WORKFLOW, join(folder, 'workflows', 'img2img.json'));
    await writeFile(join(folder, 'engines.yaml'), img2imgRouting(fake.url, { concurrency: 1, timeout: '1m' }));
    serviceEnv = { ENGINES_FILE: join(folder, 'engines.yaml'), JOB_ATTEMPTS: '3' };
    processes = new Processes(env);
    api = await processes.start('api', serviceEnv);
    ({ key } = await createUser(env));
  }, 60_000);

  afterAll(async () => {
    await processes?.stopAll();
    await fake?.close();
    await env?.dispose();
  });

  it("completes a job with the workflow's output, its progress rising on the item's event stream", async () => {
    const worker = await processes.start('worker', serviceEnv);
    try {
      const { id, image } = await submit();
      const progress = await streamedProgress(api.baseUrl, key, id);

      const item = await waitForFinal(api.baseUrl, key, id);
      const outputs = await expectCompleteWithOutputs(api.baseUrl, item);
      const input = await sharp(image).metadata();
      expect(await sharp(outputs.stock).metadata()).toMatchObject({ width: input.width, height: input.height });
      expect(promptsOf(id).map(({ state }) => state)).toEqual(['success']);
      // Nothing known while queued, then rising step by step, then 1 with the result.
      const known = progress.filter((fraction): fraction is number => fraction !== null);
      expect(progress.indexOf(known[0])).toBe(progress.length - known.length);
      expect(known).toEqual([...known].sort((a, b) => a - b));
      expect(known.filter((fraction) => fraction > 0 && fraction < 1).length).toBeGreaterThan(2);
      expect(progress[progress.length - 1]).toBe(1);
    } finally {
      await processes.stop(worker);
    }
  }, 60_000);

  it('completes a job once, with its prompt run once, when its worker is killed mid-job', async () => {
    const doomed = await processes.start('worker', serviceEnv);
    const { id } = await submit();
    await waitUntil(() => promptsOf(id)[0]?.state === 'running', 'the prompt to run');

    await doomed.stop('SIGKILL');
    const worker = await processes.start('worker', serviceEnv);
    try {
      const item = await waitForFinal(api.baseUrl, key, id, 45_000);

      await expectCompleteWithOutputs(api.baseUrl, item);
      expect(promptsOf(id).map(({ state }) => state)).toEqual(['success']);
    } finally {
      await processes.stop(worker);
    }
  }, 90_000);

  it('completes a job whose result could not be stored the first time from the same prompt, run once', async () => {
    fake.switches.stepMs = 20;
    const restore = await failNextCompletions(env);
    const worker = await processes.start('worker', serviceEnv);
    try {
      const { id } = await submit();
      const item = await waitForFinal(api.baseUrl, key, id, 45_000);

      await expectCompleteWithOutputs(api.baseUrl, item);
      expect(await completionsTried(env)).toBe(2);
      expect(promptsOf(id).map(({ state }) => state)).toEqual(['success']);
    } finally {
      await processes.stop(worker);
      await restore();
    }
  }, 60_000);

  it('leaves its prompt running at a rollout, for the next worker to follow: run once, never interrupted, its slot kept', async () => {
    fake.maxInFlight = 0;
    // The prompt still runs long after its worker stopped.
    fake.switches.stepMs = 600;
    // Past this, a worker told to stop stops its jobs: far sooner than the prompt's 8 steps.
    const leaving = await processes.start('worker', { ...serviceEnv, SHUTDOWN_TIMEOUT_MS: '200' });
    const { id } = await submit();
    await waitUntil(() => promptsOf(id)[0]?.state === 'running', 'the prompt to run');
    const interruptsBefore = fake.interrupts.length;
    const worker = await processes.start('worker', serviceEnv);
    try {
      expect(await leaving.stop('SIGTERM')).toBe(0);
      // Taken at once by the worker left, while the first job's prompt still runs and before that job's next attempt:
      // it must wait for the slot the stopped worker left taken.
      const { id: next } = await submit();

      const items = await Promise.all([id, next].map((job) => waitForFinal(api.baseUrl, key, job, 45_000)));

      for (const item of items) await expectCompleteWithOutputs(api.baseUrl, item);
      expect(promptsOf(id).map(({ state }) => state)).toEqual(['success']);
      expect(fake.interrupts.slice(interruptsBefore)).toEqual([]);
      expect(fake.maxInFlight).toBe(1);
    } finally {
      await processes.stop(worker);
    }
  }, 90_000);

  it('stops the prompt a rollout left running, and frees its slot, when the job is canceled before its next attempt', async () => {
    fake.switches.stepMs = 600;
    // A slot nobody frees stays taken this long: far longer than the next job below may wait.
    const lastingSlots = { ...serviceEnv, JOB_LOCK_MS: '120000' };
    const leaving = await processes.start('worker', { ...lastingSlots, SHUTDOWN_TIMEOUT_MS: '200' });
    const { id } = await submit();
    await waitUntil(() => promptsOf(id)[0]?.state === 'running', 'the prompt to run');
    const interruptsBefore = fake.interrupts.length;
    expect(await leaving.stop('SIGTERM')).toBe(0);

    // No worker runs the job now: its prompt goes on, left for an attempt the cancel takes away.
    const canceled = await new Client(api.baseUrl, key).cancel(id);

    expect(canceled.status).toBe(200);
    expect(canceled.body).toMatchObject({ status: 'error', error: { code: 'canceled' } });
    await waitUntil(() => promptsOf(id)[0]?.state === 'interrupted', 'the prompt to be interrupted');
    expect(fake.interrupts.slice(interruptsBefore)).toEqual([
      { promptId: promptsOf(id)[0].promptId, interrupted: true },
    ]);
    fake.switches.stepMs = 20;
    const worker = await processes.start('worker', lastingSlots);
    try {
      const { id: next } = await submit();
      await expectCompleteWithOutputs(api.baseUrl, await waitForFinal(api.baseUrl, key, next, 45_000));
      expect(promptsOf(id)).toHaveLength(1);
    } finally {
      await processes.stop(worker);
    }
  }, 90_000);

  it('keeps one prompt at most in flight on the server across two workers when its concurrency is 1', async () => {
    fake.maxInFlight = 0;
    fake.switches.stepMs = 20;
    const workers = await Promise.all([processes.start('worker', serviceEnv), processes.start('worker', serviceEnv)]);
    try {
      const ids = await Promise.all([submit(), submit(), submit(), submit()]);

      const items = await Promise.all(ids.map(({ id }) => waitForFinal(api.baseUrl, key, id, 45_000)));

      expect(items.map(({ status }) => status)).toEqual(['complete', 'complete', 'complete', 'complete']);
      expect(fake.maxInFlight).toBe(1);
    } finally {
      await Promise.all(workers.map((worker) => processes.stop(worker)));
    }
  }, 90_000);
});
