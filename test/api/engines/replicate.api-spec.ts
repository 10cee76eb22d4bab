import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import sharp from 'sharp';
import { Client, createJob, type HistoryItemBody } from '../../support/client.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import {
  type FakePredictionRecord,
  type FakeReplicate,
  type FakeRun,
  REAL_ESRGAN,
  sha256,
  startFakeReplicate,
} from '../../support/fake-replicate.js';
import { openStream } from '../../support/event-stream.js';
import {
  completionsTried,
  createUser,
  expectCompleteWithOutputs,
  failNextCompletions,
  final,
  Processes,
  waitUntil,
} from '../../support/harness.js';
import { makeImage } from '../../support/jobs.js';
import { startPrismProxy, type PrismProxy } from '../../support/prism-proxy.js';
import type { RunningService } from '../../support/service.js';

const DOCUMENT = join(process.cwd(), 'test/fixtures/replicate/openapi.json');

/**
 * The operator's routing file of ENGINES.md: the `default` tool on a version of a Replicate model, and `upscale_each`, a
 * tool of the file's own on the same model run once for each result; or, `routed: false`, the same server with no
 * route to it (the `default` tool back on the local engine, the other withdrawn), as a rollout may leave it.
 */
function enginesFile(baseUrl: string, { routed = true } = {}): string {
  const route = [
    '    engine: replicate',
    `    model: ${REAL_ESRGAN.name}`,
    `    version: ${REAL_ESRGAN.version}`,
    '    inputs: { image: image }',
    '    params: { scale: 2 }',
  ];
  const tool = [
    'tools:',
    '  upscale_each:',
    '    group_tool: default',
    '    title: Upscale',
    '    generation_types:',
    '      upscale_each:',
    '        title: Upscale',
    '        description: Upscales a photo.',
    "        inputs: { image: { kind: image, required: true, description: 'The photo.' } }",
  ];
  return [
    ...(routed ? tool : []),
    'engines:',
    '  replicate:',
    '    kind: replicate',
    '    token: ${REPLICATE_API_TOKEN}',
    `    base_url: ${baseUrl}`,
    '    concurrency: 2',
    ...(routed ? ['routes:', '  default:', ...route, '  upscale_each:', ...route, '    repeat: true'] : ['routes: {}']),
    '',
  ].join('\n');
}

/** The items an event stream sends, as they come, until it ends or `until` holds for one. */
async function followEvents(
  baseUrl: string,
  key: string,
  id: string,
  until: (item: HistoryItemBody) => boolean,
): Promise<HistoryItemBody[]> {
  const stream = await openStream(`${baseUrl}/user/generation-history/${id}/events`, key);
  try {
    expect(stream.status).toBe(200);
    let ended = false;
    void stream.ended.then(() => (ended = true));
    const items = () => stream.events.map((event) => event.data as HistoryItemBody);
    await waitUntil(() => ended || items().some(until), 'the event stream to end or reach the item', 30_000);
    const all = items();
    const last = all.findIndex(until);
    return last < 0 ? all : all.slice(0, last + 1);
  } finally {
    stream.close();
  }
}

describe('the replicate engine in the built service', () => {
  let env: TestEnvironment;
  let processes: Processes;
  let fake: FakeReplicate;
  let api: PrismProxy;
  let service: RunningService;
  let key: string;
  /** The routing file on the fake, and its token: every process's settings. */
  let settings: Record<string, string>;
  /** The settings after a rollout that routed the `default` tool away from Replicate, the server still named. */
  let routedAway: Record<string, string>;

  beforeAll(async () => {
    env = await createTestEnvironment();
    fake = await startFakeReplicate();
    api = await startPrismProxy({
      document: DOCUMENT,
      upstream: fake.url,
      direct: (method, path) => (method === 'POST' && path === '/files') || path.startsWith('/outputs/'),
    });
    fake.publicUrl = api.url;
    const file = join(env.dataDir, 'engines.yaml');
    await writeFile(file, enginesFile(api.url));
    processes = new Processes(env);
    // Uploads of at most 80,000 px, which every job here sends: the model's 256x320 result (81,920 px) is larger than
    // any upload may be, as an upscaler's result is, and completes all the same (OUTPUT_MAX_PIXELS).
    const limits = { IMAGE_MAX_PIXELS: '80000' };
    settings = { ENGINES_FILE: file, REPLICATE_API_TOKEN: fake.token, ...limits };
    const unrouted = join(env.dataDir, 'engines-unrouted.yaml');
    await writeFile(unrouted, enginesFile(api.url, { routed: false }));
    routedAway = { ENGINES_FILE: unrouted, REPLICATE_API_TOKEN: fake.token, ...limits };
    service = await processes.start('all', settings);
    ({ key } = await createUser(env));
  }, 120_000);

  afterAll(async () => {
    await processes?.stopAll();
    await api?.close();
    await fake?.close();
    await env?.dispose();
  });

  it("completes a job with the model's output, its progress rising on the item's event stream", async () => {
    fake.run({ kind: 'succeed', steps: 5, stepMs: 700 });
    const image = await makeImage(320, 240);

    const id = await createJob(service.baseUrl, key, {
      tool: 'default',
      image: { data: image, filename: 'photo.png', contentType: 'image/png' },
    });
    const events = await followEvents(service.baseUrl, key, id, (item) => item.status !== 'pending');
    const item = await final(service.baseUrl, key, id);

    const outputs = await expectCompleteWithOutputs(service.baseUrl, item);
    const stock = await sharp(outputs.stock).metadata();
    expect({ width: stock.width, height: stock.height }).toEqual({ width: 256, height: 320 });
    const running = events.filter((event) => event.status === 'pending' && typeof event.progress === 'number');
    const progress = running.map((event) => event.progress as number);
    expect(progress.length).toBeGreaterThan(1);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
    expect(progress[0]).toBeLessThan(progress.at(-1)!);
    expect(events.at(-1)).toMatchObject({ status: 'complete', progress: 1 });
    const prediction = fake.predictions.find((candidate) => candidate.input['image'] === sha256(image));
    expect(prediction).toMatchObject({ createdBy: 'version', input: { scale: 2 }, status: 'succeeded' });
    expect(api.violations).toEqual([]);
  }, 60_000);

  it('completes a job whose result could not be stored the first time from the same prediction, paid for once', async () => {
    fake.run({ kind: 'succeed', steps: 2, stepMs: 100 });
    const image = await makeImage(320, 240, 'png', '#5a8a3a');
    const restore = await failNextCompletions(env);
    try {
      const id = await createJob(service.baseUrl, key, {
        tool: 'default',
        image: { data: image, filename: 'photo.png', contentType: 'image/png' },
      });
      const item = await final(service.baseUrl, key, id);

      await expectCompleteWithOutputs(service.baseUrl, item);
      expect(await completionsTried(env)).toBe(2);
      expect(fake.predictions.filter((p) => p.input['image'] === sha256(image))).toHaveLength(1);
      expect(api.violations).toEqual([]);
    } finally {
      await restore();
    }
  }, 60_000);

  it('completes a job of three results, one prediction each, whose results could not be stored the first time, each prediction paid for once', async () => {
    fake.run({ kind: 'succeed', steps: 2, stepMs: 100 });
    const image = await makeImage(320, 240, 'png', '#8a5a3a');
    const restore = await failNextCompletions(env);
    try {
      const id = await createJob(service.baseUrl, key, {
        tool: 'upscale_each',
        image: { data: image, filename: 'photo.png', contentType: 'image/png' },
        num_outputs: '3',
      });
      const item = await final(service.baseUrl, key, id);

      await expectCompleteWithOutputs(service.baseUrl, item);
      expect(item.outputs).toHaveLength(3);
      expect(await completionsTried(env)).toBe(2);
      expect(fake.predictions.filter((p) => p.input['image'] === sha256(image))).toHaveLength(3);
      expect(api.violations).toEqual([]);
    } finally {
      await restore();
    }
  }, 60_000);

  it('tells Replicate to stop when the job is canceled', async () => {
    fake.run({ kind: 'hang' });
    const image = await makeImage(300, 200, 'png', '#a53a3a');
    const id = await createJob(service.baseUrl, key, {
      tool: 'default',
      image: { data: image, filename: 'photo.png', contentType: 'image/png' },
    });
    await fake.waitFor(
      (f) => f.predictions.some((p) => p.input['image'] === sha256(image) && p.answeredStatus !== undefined),
      'the prediction to be created',
    );

    const canceled = await new Client(service.baseUrl, key).cancel(id);
    const prediction = fake.predictions.find((p) => p.input['image'] === sha256(image))!;
    await fake.waitFor((f) => f.cancels.includes(prediction.id), 'the cancel to reach Replicate', 10_000);

    expect(canceled.status).toBe(200);
    expect(await final(service.baseUrl, key, id)).toMatchObject({ status: 'error', error: { code: 'canceled' } });
    expect(prediction.status).toBe('canceled');
    expect(api.violations).toEqual([]);
  }, 60_000);

  /**
   * A job whose prediction runs when its worker stops past SHUTDOWN_TIMEOUT_MS, as at a rollout: the prediction is left
   * running for the job's next attempt. It succeeds after 4 s, or, `plan` a hang, runs until it is canceled.
   */
  async function leftRunningAtRollout(
    apiUrl: string,
    colour: string,
    plan: FakeRun = { kind: 'succeed', steps: 8, stepMs: 500 },
  ) {
    // Past this, a worker told to stop stops its jobs: far sooner than the prediction's run.
    const leaving = await processes.start('worker', { ...settings, SHUTDOWN_TIMEOUT_MS: '200' });
    fake.run(plan);
    const image = await makeImage(280, 220, 'png', colour);
    const id = await createJob(apiUrl, key, {
      tool: 'default',
      image: { data: image, filename: 'photo.png', contentType: 'image/png' },
    });
    const ours = (p: FakePredictionRecord) => p.input['image'] === sha256(image);
    await fake.waitFor((f) => f.predictions.some((p) => ours(p) && p.status === 'processing'), 'the prediction to run');
    const cancelsBefore = fake.cancels.length;
    expect(await leaving.stop('SIGTERM')).toBe(0);
    return { id, predictions: () => fake.predictions.filter(ours), cancelsBefore };
  }

  /** Rewrites a job's run record as the previous version kept it: the engine's own text, without its server's name. */
  async function recordAsThePreviousVersion(id: string): Promise<void> {
    const redis = new Redis(env.redisUrl, { keyPrefix: `${env.redisPrefix}:` });
    try {
      const stored = JSON.parse((await redis.get(`engine-run:${id}`)) ?? 'null') as { engine: string; run: string };
      expect(stored.engine).toBe('replicate');
      await redis.set(`engine-run:${id}`, stored.run, 'KEEPTTL');
    } finally {
      redis.disconnect();
    }
  }

  it.each([
    { recorded: 'by this version', colour: '#3a6ea5', byThePreviousVersion: false },
    { recorded: 'by the previous version, with no server name', colour: '#3aa56e', byThePreviousVersion: true },
  ])(
    'leaves its prediction running at a rollout, for the next worker to follow: created once, never canceled (recorded $recorded)',
    async ({ colour, byThePreviousVersion }) => {
      // An API and workers apart, as deployed: the worker stopped here is the one running the job.
      await processes.stop(service);
      const apiAlone = await processes.start('api', settings);
      const { id, predictions, cancelsBefore } = await leftRunningAtRollout(apiAlone.baseUrl, colour);
      if (byThePreviousVersion) await recordAsThePreviousVersion(id);

      const next = await processes.start('worker', settings);
      const item = await final(apiAlone.baseUrl, key, id, 45_000);
      await processes.stop(next);

      await expectCompleteWithOutputs(apiAlone.baseUrl, item);
      expect(predictions()).toHaveLength(1);
      expect(fake.cancels.slice(cancelsBefore)).toEqual([]);
      expect(api.violations).toEqual([]);
    },
    90_000,
  );

  it.each([
    { files: 'the same routing file', settingsOf: () => settings, colour: '#6ea53a' },
    { files: 'a routing file that sends the tool elsewhere', settingsOf: () => routedAway, colour: '#a53a6e' },
  ])(
    'cancels the prediction a rollout left running when the job is canceled before its next attempt, by an API with $files',
    async ({ settingsOf, colour }) => {
      // No worker comes after the one stopped: the API that takes the cancel stops the prediction.
      const apiAlone = await processes.start('api', settingsOf());
      const { id, predictions, cancelsBefore } = await leftRunningAtRollout(apiAlone.baseUrl, colour, { kind: 'hang' });

      const canceled = await new Client(apiAlone.baseUrl, key).cancel(id);

      expect(canceled.status).toBe(200);
      expect(canceled.body).toMatchObject({ status: 'error', error: { code: 'canceled' } });
      const [prediction] = predictions();
      expect(fake.cancels.slice(cancelsBefore)).toEqual([prediction.id]);
      expect(prediction.status).toBe('canceled');
      expect(api.violations).toEqual([]);
    },
    90_000,
  );

  it("stops the prediction a rollout left running when the next worker's route runs the job elsewhere", async () => {
    const apiAlone = await processes.start('api', routedAway);
    // Running until stopped: a prediction that ended on its own before the next worker came would prove nothing.
    const { id, predictions, cancelsBefore } = await leftRunningAtRollout(apiAlone.baseUrl, '#6e3aa5', {
      kind: 'hang',
    });

    const next = await processes.start('worker', routedAway);
    const item = await final(apiAlone.baseUrl, key, id, 45_000);
    await processes.stop(next);

    // The local engine's result: the job's image enhanced, not the model's.
    const outputs = await expectCompleteWithOutputs(apiAlone.baseUrl, item);
    const stock = await sharp(outputs.stock).metadata();
    expect({ width: stock.width, height: stock.height }).toEqual({ width: 280, height: 220 });
    const [prediction] = predictions();
    expect(fake.cancels.slice(cancelsBefore)).toEqual([prediction.id]);
    expect(prediction.status).toBe('canceled');
    expect(api.violations).toEqual([]);
  }, 90_000);
});
