import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import sharp from 'sharp';
import type { ReplicateRoute, ReplicateServerSetting } from '../../src/config/engine-settings.js';
import {
  PermanentEngineError,
  TransientEngineError,
  type EngineResult,
  type EngineRequest,
} from '../../src/engines/index.js';
import { ReplicateServer } from '../../src/engines/index.js';
import { onlyImage } from '../support/pixels.js';
import {
  FLUX_KONTEXT_PRO,
  FLUX_SCHNELL,
  REAL_ESRGAN,
  sha256,
  startFakeReplicate,
  type FakeReplicate,
} from '../support/fake-replicate.js';
import { makeImage } from '../support/jobs.js';
import { memoryRuns } from '../support/run-record.js';
import { startPrismProxy, type PrismProxy } from '../support/prism-proxy.js';

const DOCUMENT = join(process.cwd(), 'test/fixtures/replicate/openapi.json');
const LIMITS = { maxOutputBytes: 16 * 1024 * 1024, maxOutputPixels: 16_000_000, minOutputSide: 64 };

let fake: FakeReplicate;
let api: PrismProxy;

beforeAll(async () => {
  fake = await startFakeReplicate();
  api = await startPrismProxy({
    document: DOCUMENT,
    upstream: fake.url,
    direct: (method, path) => (method === 'POST' && path === '/files') || path.startsWith('/outputs/'),
  });
  fake.publicUrl = api.url;
}, 90_000);

afterAll(async () => {
  await api?.close();
  await fake?.close();
});

afterEach(() => {
  // Every JSON request the engine sent, and every answer, kept to Replicate's published contract.
  expect(api.violations).toEqual([]);
  fake.run({ kind: 'succeed' });
  fake.down(false);
  fake.predictions.length = 0;
  fake.files.length = 0;
  fake.cancels.length = 0;
  fake.requests.length = 0;
});

function server(overrides: Partial<ReplicateServerSetting> = {}): ReplicateServer {
  return new ReplicateServer(
    {
      kind: 'replicate',
      name: 'replicate',
      concurrency: 2,
      timeoutMs: 60_000,
      headers: { 'X-Operator': 'images' },
      token: fake.token,
      baseUrl: api.url,
      ...overrides,
    },
    LIMITS,
  );
}

function route(overrides: Partial<ReplicateRoute> = {}): ReplicateRoute {
  return {
    kind: 'replicate',
    key: 'default',
    tool: 'default',
    generationType: undefined,
    engine: 'replicate',
    describe: {},
    model: undefined,
    version: REAL_ESRGAN.version,
    inputs: { image: 'image' },
    params: { scale: 2 },
    ...overrides,
  };
}

function job(image: Buffer, extra: Partial<EngineRequest> = {}): EngineRequest {
  return {
    jobId: 'f4a1c0de-0000-4000-8000-000000000001',
    tool: 'default',
    generationType: 'enhance',
    images: { image },
    texts: {},
    ...extra,
  };
}

/** A PNG of noise, which does not compress: over the data URI limit. */
async function largeImage(): Promise<Buffer> {
  const side = 720;
  return sharp(randomBytes(side * side * 3), { raw: { width: side, height: side, channels: 3 } })
    .png()
    .toBuffer();
}

function bytesOf(result: EngineResult): Buffer {
  const image = onlyImage(result);
  if (image.kind !== 'encoded') throw new Error(`expected the encoded image Replicate made, got ${image.kind}`);
  return image.data;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a failure');
    },
    (error: unknown) => error,
  );
}

describe('ReplicateEngine against the fake through Prism', () => {
  it('runs an official model by name: mapped input and params, Prefer: wait, then polling to the end', async () => {
    fake.run({ kind: 'succeed', steps: 5, stepMs: 300 });
    const image = await makeImage(200, 150);
    const progress: number[] = [];
    const sut = server().engineFor(
      route({
        model: FLUX_KONTEXT_PRO.name,
        version: undefined,
        inputs: { image: 'input_image' },
        params: { output_format: 'png' },
      }),
    );

    const result = await sut.generate(job(image, { onProgress: (fraction) => progress.push(fraction) }));

    const metadata = await sharp(bytesOf(result)).metadata();
    expect({ format: metadata.format, width: metadata.width }).toEqual({ format: 'png', width: 256 });
    const [prediction] = fake.predictions;
    expect(fake.predictions).toHaveLength(1);
    expect(prediction).toMatchObject({
      createdBy: 'model',
      model: FLUX_KONTEXT_PRO.name,
      prefer: 'wait=1',
      input: { input_image: sha256(image), output_format: 'png' },
      imageSources: { input_image: 'data-uri' },
      status: 'succeeded',
    });
    // The wait ended before the model did; the engine polled the rest of the way.
    expect(prediction.answeredStatus).not.toBe('succeeded');
    expect(
      fake.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/predictions/')).length,
    ).toBeGreaterThan(1);
    expect(progress.length).toBeGreaterThan(1);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
    expect(new Set(progress).size).toBe(progress.length);
    expect(progress.at(-1)).toBe(1);
  });

  it('runs a model version with POST /predictions, answered at once when the run fits in the wait', async () => {
    fake.run({ kind: 'succeed', startMs: 20, steps: 2, stepMs: 50 });
    const image = await makeImage(120, 90, 'jpeg');
    const sut = server().engineFor(route({ model: REAL_ESRGAN.name }));

    const result = await sut.generate(job(image));

    expect((await sharp(bytesOf(result)).metadata()).format).toBe('png');
    expect(fake.predictions).toHaveLength(1);
    expect(fake.predictions[0]).toMatchObject({
      createdBy: 'version',
      version: REAL_ESRGAN.version,
      answeredStatus: 'succeeded',
      input: { image: sha256(image), scale: 2 },
    });
    expect(fake.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/predictions/'))).toEqual([]);
    // The names were checked against that version's schema first.
    expect(fake.requests.map((r) => `${r.method} ${r.path}`)).toContain(
      `GET /models/${REAL_ESRGAN.name}/versions/${REAL_ESRGAN.version}`,
    );
  });

  it("sends the seed and num_outputs under the route's input names, and takes each file of the list output", async () => {
    const sut = server().engineFor(
      route({
        model: FLUX_SCHNELL.name,
        version: undefined,
        inputs: { prompt: 'prompt' },
        params: {},
        seedInput: 'seed',
        outputs: { input: 'num_outputs', max: 4 },
      }),
    );

    const result = await sut.generate(
      job(Buffer.alloc(0), { images: {}, texts: { prompt: 'a chair' }, seed: 7, outputs: 2 }),
    );

    expect(fake.predictions[0].input).toEqual({ prompt: 'a chair', seed: 7, num_outputs: 2 });
    const images = result as { kind: string; data: Buffer }[];
    expect(images).toHaveLength(2);
    expect(sha256(images[0].data)).not.toBe(sha256(images[1].data));
  });

  it('sends an image over 1 MB through the files API and deletes the file after the job', async () => {
    const image = await largeImage();
    expect(image.length).toBeGreaterThan(1024 * 1024);
    const sut = server().engineFor(route());

    await sut.generate(job(image));

    expect(fake.predictions[0]).toMatchObject({ input: { image: sha256(image) }, imageSources: { image: 'file' } });
    expect(fake.files).toEqual([
      expect.objectContaining({ sha256: sha256(image), size: image.length, contentType: 'image/png', deleted: true }),
    ]);
  });

  it('deletes the uploaded file when the model fails too', async () => {
    fake.run({ kind: 'fail', error: 'CUDA out of memory', steps: 1, stepMs: 50 });
    const sut = server().engineFor(route());

    const error = await rejection(sut.generate(job(await largeImage())));

    expect(error).toBeInstanceOf(PermanentEngineError);
    expect(fake.files).toEqual([expect.objectContaining({ deleted: true })]);
  });

  it("fails the job engine_failed with the model's own message when the model fails", async () => {
    fake.run({ kind: 'fail', error: '  Input image is too small:\n  at least 64 px.  ', steps: 2, stepMs: 50 });
    const sut = server().engineFor(route());

    const error = await rejection(sut.generate(job(await makeImage(80, 60))));

    expect(error).toBeInstanceOf(PermanentEngineError);
    expect(error).toMatchObject({
      code: 'engine_failed',
      clientMessage: 'Input image is too small: at least 64 px.',
    });
  });

  it("fails the job with Replicate's detail when it refuses the token (401)", async () => {
    const error = await rejection(
      server({ token: 'r8_wrong' })
        .engineFor(route())
        .generate(job(await makeImage(80, 60))),
    );

    expect(error).toMatchObject({
      code: 'engine_failed',
      clientMessage: 'You did not pass a valid authentication token',
    });
    expect(fake.predictions).toEqual([]);
  });

  it('sends a param a route by version alone may not know is wrong, which Replicate drops without a word', async () => {
    fake.run({ kind: 'succeed', steps: 1, stepMs: 50 });
    const image = await makeImage(80, 60);

    await server()
      .engineFor(route({ params: { scale: 2, scael: 4 } }))
      .generate(job(image));

    expect(fake.predictions[0]).toMatchObject({ input: { image: sha256(image), scale: 2 }, dropped: ['scael'] });
  });

  it("fails the job before any prediction when a name it sends is not in the model's schema", async () => {
    const image = await makeImage(80, 60);
    const failure = (overrides: Partial<ReplicateRoute>) =>
      rejection(server().engineFor(route(overrides)).generate(job(image)));

    const errors = [
      // That version of that model: its schema is the version's.
      await failure({ model: REAL_ESRGAN.name, params: { scale: 2, scael: 4 } }),
      // An official model by name: its latest version's.
      await failure({ model: FLUX_KONTEXT_PRO.name, version: undefined }),
      // A version of another model.
      await failure({ model: FLUX_KONTEXT_PRO.name }),
    ];

    expect(errors.map((error) => (error as PermanentEngineError).clientMessage)).toEqual([
      'The model has no input "scael" (routes.default.params.scael); its inputs: image, scale, face_enhance',
      'The model has no inputs "image" (routes.default.inputs.image), "scale" (routes.default.params.scale); its inputs: prompt, input_image, aspect_ratio, output_format, safety_tolerance, seed',
      `Replicate has no version ${REAL_ESRGAN.version} of "${FLUX_KONTEXT_PRO.name}": the route's model and version must name one model.`,
    ]);
    expect(fake.predictions).toEqual([]);
  });

  it('fails the job telling the operator to route by version when a model by name is refused (404)', async () => {
    const image = await makeImage(80, 60);
    const byName = (model: string) =>
      rejection(
        server()
          .engineFor(route({ model, version: undefined }))
          .generate(job(image)),
      );

    // A community model runs only by version; an unknown one not at all.
    const errors = [await byName(REAL_ESRGAN.name), await byName('nobody/nothing')];

    expect(errors.map((error) => (error as PermanentEngineError).clientMessage)).toEqual(
      [REAL_ESRGAN.name, 'nobody/nothing'].map(
        (model) =>
          `Replicate runs "${model}" only by its version, if at all: give the route \`version:\` (the model's API page shows it), not \`model:\`.`,
      ),
    );
    expect(errors).toEqual([
      expect.objectContaining({ code: 'engine_failed' }),
      expect.objectContaining({ code: 'engine_failed' }),
    ]);
    expect(fake.predictions).toEqual([]);
  });

  it('cancels the prediction on Replicate before giving up when the signal fires', async () => {
    fake.run({ kind: 'hang' });
    const stop = new AbortController();
    const sut = server().engineFor(route());

    const running = rejection(sut.generate(job(await makeImage(80, 60), { signal: stop.signal })));
    await fake.waitFor((f) => f.predictions[0]?.answeredStatus === 'processing', 'the creation to be answered');
    stop.abort(new Error('item canceled'));
    const error = await running;

    const { id } = fake.predictions[0];
    // On a busy machine, through Prism, the cancel's first try may be cut and repeated by the client.
    await fake.waitFor((f) => f.cancels.includes(id), 'the cancel to reach Replicate');

    expect(error).toEqual(new Error('item canceled'));
    expect(fake.cancels).toEqual([id]);
    expect(fake.predictions[0].status).toBe('canceled');
  });

  it('gives up at once when the signal fires during the creation, and cancels the prediction once it has an id', async () => {
    fake.run({ kind: 'hang' });
    const stop = new AbortController();
    const sut = server().engineFor(route());

    const running = rejection(sut.generate(job(await makeImage(80, 60), { signal: stop.signal })));
    await fake.waitFor((f) => f.predictions[0]?.status === 'processing', 'the prediction to run');
    stop.abort(new Error('item deleted'));
    const error = await running;
    const answeredBeforeGivingUp = fake.predictions[0].answeredStatus;
    const { id } = fake.predictions[0];
    await fake.waitFor((f) => f.cancels.includes(id), 'the cancel');

    expect({ error, answeredBeforeGivingUp }).toEqual({
      error: new Error('item deleted'),
      answeredBeforeGivingUp: undefined,
    });
    expect(fake.cancels).toEqual([id]);
    expect(fake.predictions[0].status).toBe('canceled');
  });

  it('rides out 5xx on polls and a 429 on creation (the client repeats them)', async () => {
    fake.failRequests({ status: 429, count: 1, path: '/predictions', method: 'POST', retryAfter: 1 });
    fake.failRequests({ status: 503, count: 2, path: '/predictions/', method: 'GET' });
    fake.run({ kind: 'succeed', steps: 3, stepMs: 300 });
    const sut = server().engineFor(route());

    await sut.generate(job(await makeImage(80, 60)));

    expect(fake.requests.map((r) => r.status)).toEqual(expect.arrayContaining([429, 503, 503]));
    expect(fake.predictions).toHaveLength(1);
  });

  it('fails the attempt as transient when Replicate keeps answering 5xx or 429, or is down', async () => {
    const image = await makeImage(80, 60);

    fake.failRequests({ status: 500, count: 1, path: '/predictions', method: 'POST' });
    const serverError = await rejection(server().engineFor(route()).generate(job(image)));
    fake.failRequests({ status: 429, count: 6, path: '/predictions', method: 'POST', retryAfter: 1 });
    const busy = await rejection(server().engineFor(route()).generate(job(image)));
    fake.down(true);
    const down = await rejection(server().engineFor(route()).generate(job(image)));
    const unreachable = await rejection(
      server({ baseUrl: 'http://127.0.0.1:9' }).engineFor(route()).generate(job(image)),
    );

    expect([serverError, busy, down, unreachable]).toEqual([
      expect.any(TransientEngineError),
      expect.any(TransientEngineError),
      expect.any(TransientEngineError),
      expect.any(TransientEngineError),
    ]);
    expect(fake.predictions).toEqual([]);
  });

  it('resumes the prediction an earlier attempt of the job started, instead of running the model again', async () => {
    fake.run({ kind: 'succeed', steps: 6, stepMs: 250 });
    const runs = memoryRuns();
    const sut = server().engineFor(route());
    const image = await makeImage(80, 60);

    const first = rejection(sut.generate(job(image, { runs })));
    await fake.waitFor((f) => f.predictions[0]?.status === 'processing', 'the prediction to run');
    // Every try the client makes at the next poll fails: the attempt ends while the model runs on.
    fake.failRequests({ status: 503, count: 6, path: '/predictions/', method: 'GET' });
    expect(await first).toBeInstanceOf(TransientEngineError);
    expect(runs.value).toContain(fake.predictions[0].id);

    const result = await sut.generate(job(image, { runs }));

    expect((await sharp(bytesOf(result)).metadata()).format).toBe('png');
    expect(fake.predictions).toHaveLength(1);
    expect(fake.cancels).toEqual([]);
  });

  it('reads the output of the prediction it has again on an attempt after one whose result was not stored', async () => {
    fake.run({ kind: 'succeed', steps: 2, stepMs: 50 });
    const runs = memoryRuns();
    const sut = server().engineFor(route());
    const image = await makeImage(80, 60);
    const first = await sut.generate(job(image, { runs }));

    // The worker forgets the run only once the job's result is stored: until then, another attempt finds it.
    expect(runs.value).toContain(fake.predictions[0].id);
    const turns: string[] = [];
    const slot = {
      take: () => Promise.resolve(void turns.push('take')),
      free: () => Promise.resolve(void turns.push('free')),
    };
    const again = await sut.generate(job(image, { runs, slot }));

    expect(bytesOf(again)).toEqual(bytesOf(first));
    expect(fake.predictions).toHaveLength(1);
    // A prediction that has ended needs no turn on the model to be read again.
    expect(turns.filter((turn) => turn === 'take')).toEqual([]);
  });

  it('keeps a failed prediction for an attempt after one whose failure was not recorded, which fails alike', async () => {
    fake.run({ kind: 'fail', error: 'NSFW content detected', steps: 1, stepMs: 50 });
    const runs = memoryRuns();
    const sut = server().engineFor(route());
    const image = await makeImage(80, 60);

    const errors = [
      await rejection(sut.generate(job(image, { runs }))),
      await rejection(sut.generate(job(image, { runs }))),
    ];

    expect(errors).toEqual([
      expect.objectContaining({ code: 'engine_failed', clientMessage: 'NSFW content detected' }),
      expect.objectContaining({ code: 'engine_failed', clientMessage: 'NSFW content detected' }),
    ]);
    expect(fake.predictions).toHaveLength(1);
  });

  it('probes the API with the token: up when it answers, down when it does not', async () => {
    const sut = server();
    const up = await sut.probe(AbortSignal.timeout(5_000));
    fake.down(true);
    const down = await sut.probe(AbortSignal.timeout(5_000));

    expect({ up, down }).toEqual({ up: true, down: false });
  });
});
