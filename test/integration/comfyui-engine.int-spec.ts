import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import sharp, { type Metadata } from 'sharp';
import type { ComfyRoute, ComfyServerSetting, ComfyWorkflow } from '../../src/config/engine-settings.js';
import {
  PermanentEngineError,
  RunHandedOver,
  TransientEngineError,
  WorkerShutdown,
  type EngineResult,
  type EngineRequest,
} from '../../src/engines/index.js';
import { ComfyServer } from '../../src/engines/index.js';
import { onlyImage } from '../support/pixels.js';
import type { AppConfig } from '../../src/config/config.js';
import { EngineSlotQueue } from '../../src/jobs/engine-slot-queue.js';
import { FAIL_FAST_OPTIONS, ServiceRedis } from '../../src/redis/redis.js';
import { EngineSlots } from '../../src/worker/engine-slots.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { startFakeComfy, type FakeComfy } from '../support/fake-comfyui.js';
import { makeImage } from '../support/jobs.js';
import { memoryRuns } from '../support/run-record.js';

const WORKFLOW = JSON.parse(
  readFileSync(new URL('../../docs/routing/workflows/img2img.json', import.meta.url), 'utf8'),
) as ComfyWorkflow;

function route(workflow: ComfyWorkflow = WORKFLOW): ComfyRoute {
  return {
    kind: 'comfyui',
    key: 'default',
    tool: 'default',
    generationType: undefined,
    engine: 'comfy',
    describe: {},
    workflowFile: 'workflows/img2img.json',
    workflow,
    inputs: { image: { node: '2', input: 'image' }, prompt: { node: '4', input: 'text' } },
    output: { node: '8' },
    seed: { node: '6', input: 'seed' },
  };
}

/** The img2img route with its KSampler's seed linked from node "9", a node of class `type` that the route seeds. */
function seededBy(type: string): ComfyRoute {
  const workflow = structuredClone(WORKFLOW) as Record<string, ComfyWorkflow[string]>;
  workflow['9'] = { class_type: type, inputs: { seed: 0 }, _meta: { title: 'Seed' } };
  workflow['6'].inputs.seed = ['9', 0];
  return { ...route(workflow), seed: { node: '9', input: 'seed' } };
}

function serverFor(url: string): ComfyServer {
  const setting: ComfyServerSetting = {
    kind: 'comfyui',
    name: 'comfy',
    url,
    urls: [url],
    discover: undefined,
    concurrency: 1,
    timeoutMs: 60_000,
    headers: { 'X-Comfy-Token': 'secret' },
  };
  return new ComfyServer(setting, {
    maxOutputBytes: 64 * 1024 * 1024,
    maxOutputPixels: 40_000_000,
    minOutputSide: 64,
  });
}

let jobs = 0;
async function request(extra: Partial<EngineRequest> = {}): Promise<EngineRequest> {
  jobs++;
  return {
    jobId: `00000000-0000-4000-8000-${String(jobs).padStart(12, '0')}`,
    tool: 'default',
    generationType: 'enhance',
    images: { image: await makeImage(96, 64) },
    texts: { prompt: 'a red chair' },
    runs: memoryRuns(),
    ...extra,
  };
}

async function decoded(result: EngineResult): Promise<Metadata> {
  const image = onlyImage(result);
  if (image.kind !== 'encoded') throw new Error(`expected an encoded image, got ${image.kind}`);
  return sharp(image.data).metadata();
}

async function failure(promise: Promise<unknown>): Promise<Error> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected the generation to fail');
}

describe('ComfyUI engine against a fake ComfyUI server', () => {
  let fake: FakeComfy;
  let server: ComfyServer;

  beforeEach(async () => {
    fake = await startFakeComfy();
    server = serverFor(fake.url);
  });

  afterEach(async () => {
    await server.close();
    await fake.close();
  });

  it('uploads the images into a folder of the job, sets the text and the seed, and returns the output node image', async () => {
    const sut = server.engineFor(route());
    const job = await request();

    const meta = await decoded(await sut.generate(job));

    expect(meta).toMatchObject({ format: 'png', width: 96, height: 64 });
    expect(fake.uploads).toEqual([{ filename: 'image.png', subfolder: job.jobId, type: 'input', overwrite: 'true' }]);
    expect(fake.prompts).toHaveLength(1);
    const [queued] = fake.prompts;
    expect(queued.prompt['2'].inputs.image).toBe(`${job.jobId}/image.png`);
    expect(queued.prompt['4'].inputs.text).toBe('a red chair');
    expect(queued.prompt['5'].inputs.text).toBe(WORKFLOW['5'].inputs.text);
    expect(typeof queued.prompt['6'].inputs.seed).toBe('number');
    expect(fake.wsConnections.map(({ clientId }) => clientId)).toEqual([queued.clientId]);
    expect(fake.requests.every(({ headers }) => headers['x-comfy-token'] === 'secret')).toBe(true);
    expect(fake.wsConnections[0].headers['x-comfy-token']).toBe('secret');
  });

  it('draws the same seed on every attempt of a job and another on another job', async () => {
    const sut = server.engineFor(route());
    const job = await request();
    await sut.generate(job);
    await sut.generate({ ...job, runs: memoryRuns() });
    await sut.generate(await request());

    const seeds = fake.prompts.map(({ prompt }) => prompt['6'].inputs.seed);
    expect(seeds[0]).toBe(seeds[1]);
    expect(seeds[2]).not.toBe(seeds[0]);
  });

  it("sets the job's seed as sent, and the batch size, and returns every image of the output node's batch", async () => {
    // txt2img: the latent comes from an EmptyLatentImage whose batch_size the route sets.
    const workflow = structuredClone(WORKFLOW) as Record<string, ComfyWorkflow[string]>;
    workflow['3'] = { class_type: 'EmptyLatentImage', inputs: { width: 64, height: 64, batch_size: 1 } };
    delete workflow['2'];
    const sut = server.engineFor({
      ...route(workflow),
      inputs: { prompt: { node: '4', input: 'text' } },
      outputs: { batch: { node: '3', input: 'batch_size' } },
    });

    const result = (await sut.generate(await request({ images: {}, seed: 1234, outputs: 3 }))) as {
      kind: string;
      data: Buffer;
    }[];

    const [queued] = fake.prompts;
    expect(queued.prompt['6'].inputs.seed).toBe(1234);
    expect(queued.prompt['3'].inputs.batch_size).toBe(3);
    expect(result).toHaveLength(3);
    const colours = await Promise.all(result.map(async ({ data }) => (await sharp(data).stats()).channels[2].mean));
    expect(new Set(colours).size).toBe(3);
  });

  it('draws the seed within the range a custom seed node declares, the same on every attempt of a job', async () => {
    fake.addClass('SeedPicker', { required: { seed: ['INT', { default: 0, min: 0, max: 2 ** 32 - 1 }] } });
    const sut = server.engineFor(seededBy('SeedPicker'));
    const jobs = [await request(), await request(), await request()];
    const results: Metadata[] = [];
    for (const job of jobs) results.push(await decoded(await sut.generate(job)));
    await sut.generate({ ...jobs[0], runs: memoryRuns() });

    const seeds = fake.prompts.map(({ prompt }) => prompt['9'].inputs.seed as number);
    expect(results.map(({ format }) => format)).toEqual(['png', 'png', 'png']);
    expect(seeds.every((seed) => Number.isInteger(seed) && seed >= 0 && seed <= 2 ** 32 - 1)).toBe(true);
    expect(seeds[3]).toBe(seeds[0]);
    expect(new Set(seeds.slice(0, 3)).size).toBe(3);
  });

  it('fails the first job, naming the node and its input, when the seed goes into an input that takes no INT', async () => {
    fake.addClass('SeedText', { required: { seed: ['STRING', { default: '' }] } });
    const sut = server.engineFor(seededBy('SeedText'));

    const error = await failure(sut.generate(await request()));

    expect(error).toMatchObject({
      code: 'engine_failed',
      clientMessage: 'routes.default.seed: node "9" is a SeedText, whose input "seed" takes a STRING, not an INT.',
    });
    expect(fake.uploads).toEqual([]);
    expect(fake.prompts).toEqual([]);
  });

  it("reports progress that rises from the nodes run and the sampler steps, from the prompt's first message", async () => {
    fake.switches.steps = 5;
    fake.switches.promptAnswerDelayMs = 50;
    const sut = server.engineFor(route());
    const reported: number[] = [];

    await sut.generate(await request({ onProgress: (fraction) => reported.push(fraction) }));

    expect(reported.length).toBeGreaterThanOrEqual(5 + 7);
    expect(reported).toEqual([...reported].sort((a, b) => a - b));
    expect(reported.some((fraction) => fraction > 0 && fraction < 1)).toBe(true);
    expect(reported[reported.length - 1]).toBeLessThanOrEqual(1);
  });

  it('removes a queued prompt from the queue on cancel, leaving the running one alone', async () => {
    fake.switches.stepMs = 200;
    fake.switches.steps = 20;
    const sut = server.engineFor(route());
    const first = sut.generate(await request());
    await fake.waitFor((f) => f.prompts.length === 1 && f.prompts[0].state === 'running', 'the first prompt to run');
    const cancel = new AbortController();
    const second = sut.generate(await request({ signal: cancel.signal }));
    await fake.waitFor((f) => f.prompts.length === 2, 'the second prompt to be queued');

    cancel.abort(new Error('canceled by the client'));

    expect((await failure(second)).message).toBe('canceled by the client');
    expect(fake.queueDeletes).toEqual([fake.prompts[1].promptId]);
    expect(fake.prompts[1].state).toBe('deleted');
    expect(fake.interrupts).toEqual([]);
    fake.switches.stepMs = 1;
    await first;
    expect(fake.prompts[0].state).toBe('success');
  });

  it('interrupts the running prompt on cancel, naming it', async () => {
    fake.switches.stepMs = 200;
    fake.switches.steps = 20;
    const sut = server.engineFor(route());
    const cancel = new AbortController();
    const job = sut.generate(await request({ signal: cancel.signal }));
    await fake.waitFor((f) => f.progressSent.length > 0, 'the sampler to start');

    cancel.abort(new Error('canceled by the client'));

    expect((await failure(job)).message).toBe('canceled by the client');
    expect(fake.interrupts).toEqual([{ promptId: fake.prompts[0].promptId, interrupted: true }]);
    await fake.waitFor((f) => f.prompts[0].state === 'interrupted', 'the prompt to stop');
  });

  it('runs a new prompt on the attempt after one that timed out, not the stopped prompt again', async () => {
    fake.switches.stepMs = 200;
    fake.switches.steps = 20;
    const sut = server.engineFor(route());
    const job = await request();
    const deadline = new AbortController();
    const timedOut = sut.generate({ ...job, signal: deadline.signal });
    await fake.waitFor((f) => f.progressSent.length > 0, 'the sampler to start');
    deadline.abort(new DOMException('The engine did not answer in time.', 'TimeoutError'));
    await failure(timedOut);
    await fake.waitFor((f) => f.prompts[0].state === 'interrupted', 'the prompt to stop');
    fake.switches.stepMs = 1;

    const meta = await decoded(await sut.generate(job));

    expect(meta.format).toBe('png');
    expect(fake.prompts.map(({ state }) => state)).toEqual(['interrupted', 'success']);
    expect(fake.prompts[1].promptId).not.toBe(fake.prompts[0].promptId);
  });

  it("fails the job with the node's class, id and message when ComfyUI refuses the prompt", async () => {
    fake.switches.nodeError = {
      node: '1',
      message: 'Value not in list',
      details: "ckpt_name: 'v1-5-pruned-emaonly.safetensors' not in []",
    };
    const sut = server.engineFor(route());

    const error = await failure(sut.generate(await request()));

    expect(error).toBeInstanceOf(PermanentEngineError);
    expect(error).toMatchObject({ code: 'engine_failed' });
    expect((error as PermanentEngineError).clientMessage).toBe(
      "CheckpointLoaderSimple 1: Value not in list: ckpt_name: 'v1-5-pruned-emaonly.safetensors' not in []",
    );
  });

  it("fails the job with ComfyUI's message when a value of the workflow is out of its input's range", async () => {
    const workflow = structuredClone(WORKFLOW) as Record<string, ComfyWorkflow[string]>;
    workflow['6'].inputs.denoise = 1.5;
    const sut = server.engineFor(route(workflow));

    const error = await failure(sut.generate(await request()));

    expect(error).toMatchObject({
      code: 'engine_failed',
      clientMessage: 'KSampler 6: Value 1.5 bigger than max of 1.0: denoise',
    });
  });

  it("fails the job with the exception's message when a node fails while running", async () => {
    fake.switches.executionError = { node: '6', message: 'CUDA out of memory. Tried to allocate 2.00 GiB' };
    const sut = server.engineFor(route());

    const error = await failure(sut.generate(await request()));

    expect(error).toMatchObject({ code: 'engine_failed' });
    expect((error as PermanentEngineError).clientMessage).toBe(
      'KSampler 6: CUDA out of memory. Tried to allocate 2.00 GiB',
    );
  });

  it('fails the attempt as transient when the server does not answer', async () => {
    await fake.down();
    const sut = server.engineFor(route());

    const error = await failure(sut.generate(await request()));

    expect(error).toBeInstanceOf(TransientEngineError);
  });

  it('queues the prompt again from the start, once, when the server restarts mid-job', async () => {
    fake.switches.restartAtStep = 2;
    const sut = server.engineFor(route());
    const job = await request();
    const running = sut.generate(job);
    await fake.waitFor((f) => f.prompts[0]?.state === 'lost', 'the restart');
    fake.switches.restartAtStep = undefined;

    await decoded(await running);

    expect(fake.prompts.map(({ state }) => state)).toEqual(['lost', 'success']);
    expect(fake.uploads).toHaveLength(2);
    expect(fake.prompts[1].prompt['6'].inputs.seed).toBe(fake.prompts[0].prompt['6'].inputs.seed);
  });

  it('fails the job when the server loses its prompt a second time', async () => {
    fake.switches.restartAtStep = 2;
    const sut = server.engineFor(route());
    const job = await request();

    const error = await failure(sut.generate(job));

    expect(error).toMatchObject({ code: 'engine_failed' });
    expect(fake.prompts.map(({ state }) => state)).toEqual(['lost', 'lost']);
  });

  it('completes from the history when the socket drops mid-job and cannot reconnect', async () => {
    fake.switches.dropSocketAtStep = { step: 1, refuseMs: 60_000 };
    fake.switches.steps = 6;
    const sut = server.engineFor(route());

    const meta = await decoded(await sut.generate(await request()));

    expect(meta.format).toBe('png');
    expect(fake.prompts.map(({ state }) => state)).toEqual(['success']);
  });

  it('fails the job naming a node class the server lacks, before uploading anything', async () => {
    const workflow = structuredClone(WORKFLOW) as Record<string, ComfyWorkflow[string]>;
    workflow['9'] = { class_type: 'IPAdapterAdvanced', inputs: { model: ['1', 0] } };
    const sut = server.engineFor(route(workflow));

    const error = await failure(sut.generate(await request()));

    expect(error).toMatchObject({ code: 'engine_failed' });
    expect((error as PermanentEngineError).clientMessage).toContain('"IPAdapterAdvanced"');
    expect(fake.uploads).toEqual([]);

    fake.addClass('IPAdapterAdvanced');
    await sut.generate(await request());
    expect(fake.prompts).toHaveLength(1);
  });

  it('fails the job before uploading anything when the output node is no output node, whose image ComfyUI would not keep', async () => {
    const sut = server.engineFor({ ...route(), output: { node: '7' } });

    const error = await failure(sut.generate(await request()));

    expect(error).toMatchObject({
      code: 'engine_failed',
      clientMessage:
        'routes.default.output.node: node "7" is a VAEDecode, not an output node (such as SaveImage or PreviewImage) whose image ComfyUI keeps.',
    });
    expect(fake.uploads).toEqual([]);
    expect(fake.prompts).toEqual([]);
  });

  it('shares one websocket between the jobs of the process, routing each message to its job', async () => {
    fake.switches.slots = 3;
    const sut = server.engineFor(route());
    const progress: number[][] = [[], [], []];

    const results = await Promise.all(
      progress.map(async (reported) => sut.generate(await request({ onProgress: (f) => reported.push(f) }))),
    );

    expect(results).toHaveLength(3);
    expect(fake.wsConnections).toHaveLength(1);
    expect(new Set(fake.prompts.map(({ clientId }) => clientId)).size).toBe(1);
    for (const reported of progress) expect(reported.length).toBeGreaterThanOrEqual(fake.switches.steps);
  });

  it('is up while the server answers its system stats, and down for any other page or none', async () => {
    const page = createServer((_request, response) => response.writeHead(200).end('<html>Maintenance</html>'));
    page.listen(0, '127.0.0.1');
    await once(page, 'listening');
    const notComfy = serverFor(`http://127.0.0.1:${(page.address() as AddressInfo).port}`);
    try {
      expect(await server.probe(AbortSignal.timeout(2000))).toBe(true);
      expect(await notComfy.probe(AbortSignal.timeout(2000))).toBe(false);
      await fake.down();
      expect(await server.probe(AbortSignal.timeout(2000))).toBe(false);
    } finally {
      await notComfy.close();
      page.close();
    }
  });

  it("leaves the running prompt to the job's next attempt at the worker's shutdown, which follows it", async () => {
    fake.switches.stepMs = 100;
    fake.switches.steps = 10;
    const job = await request();
    const shutdown = new AbortController();
    const sut = server.engineFor(route());
    const stopped = sut.generate({ ...job, signal: shutdown.signal });
    await fake.waitFor((f) => f.progressSent.length > 0, 'the sampler to start');

    shutdown.abort(new WorkerShutdown());

    expect(await failure(stopped)).toBeInstanceOf(RunHandedOver);
    expect(fake.prompts[0].state).toBe('running');
    const meta = await decoded(await sut.generate(job));
    expect(meta.format).toBe('png');
    expect(fake.prompts.map(({ state }) => state)).toEqual(['success']);
    expect(fake.interrupts).toEqual([]);
  });

  it('follows the prompt an earlier attempt queued instead of queueing it again, even from another process', async () => {
    fake.switches.stepMs = 100;
    fake.switches.steps = 10;
    const job = await request();
    const first = server.engineFor(route()).generate(job);
    await fake.waitFor((f) => f.progressSent.length > 0, 'the first attempt to run');
    const other = serverFor(fake.url);

    try {
      const second = await other.engineFor(route()).generate(job);
      await first;
      const again = await other.engineFor(route()).generate(job);

      expect(fake.prompts).toHaveLength(1);
      expect((await decoded(second)).format).toBe('png');
      expect(again).toEqual(second);
    } finally {
      await other.close();
    }
  });
});

describe("ComfyUI engine in its engine's slots (EngineSlots on real Redis)", () => {
  let env: TestEnvironment;
  let redis: ServiceRedis;
  let fake: FakeComfy;
  let server: ComfyServer;

  beforeAll(async () => {
    env = await createTestEnvironment();
    redis = new ServiceRedis(env.redisUrl, { ...FAIL_FAST_OPTIONS, keyPrefix: `${env.redisPrefix}:` });
    await once(redis, 'ready');
    fake = await startFakeComfy({ steps: 10, stepMs: 50 });
    server = serverFor(fake.url);
  }, 30_000);

  afterAll(async () => {
    await server?.close();
    await fake?.close();
    redis?.disconnect();
    await env?.dispose();
  }, 30_000);

  it('queues a prompt the server lost after it said it had ended only once its turn comes again', async () => {
    const queue = new EngineSlotQueue(redis, { jobLockMs: 30_000, redisPrefix: env.redisPrefix } as AppConfig);
    const slots = new EngineSlots(queue);
    const sut = server.engineFor(route());
    // Whichever job runs first: the server tells it the prompt ended, then restarts without its history.
    fake.switches.restartAfterEnd = true;
    const run = async (job: EngineRequest) => {
      const turn = slots.turn({ engineName: 'comfy', concurrency: 1, timeoutMs: 60_000 }, job.jobId, job.signal!);
      try {
        return await sut.generate({ ...job, slot: turn.slot });
      } finally {
        await turn.end();
      }
    };

    const results = await Promise.all([
      run(await request({ signal: new AbortController().signal })),
      run(await request({ signal: new AbortController().signal })),
    ]).finally(() => queue.onApplicationShutdown());

    expect(results.map((result) => onlyImage(result).kind)).toEqual(['encoded', 'encoded']);
    expect(fake.prompts.map(({ state }) => state)).toEqual(['lost', 'success', 'success']);
    // The lost prompt's job queued it again after the other job's prompt had ended, never beside it.
    expect(fake.maxInFlight).toBe(1);
  });
});
