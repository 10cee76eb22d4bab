import { jest } from '@jest/globals';
import sharp from 'sharp';
import type { CogRoute, CogServerSetting } from '../../src/config/engine-settings.js';
import { CogServer } from '../../src/engines/index.js';
import {
  EngineTimeoutError,
  PermanentEngineError,
  TransientEngineError,
  type EngineRequest,
} from '../../src/engines/index.js';
import { type FakeCog, type FakeCogSchema, sha256, startFakeCog } from '../support/fake-cog.js';

/** The IDM-VTON shape: a person and a garment under the model's names, and fixed params beside them. */
const VTON_SCHEMA: FakeCogSchema = {
  properties: {
    human_img: { type: 'string', format: 'uri' },
    garm_img: { type: 'string', format: 'uri' },
    garment_des: { type: 'string' },
    category: { type: 'string', enum: ['upper_body', 'lower_body', 'dresses'] },
    steps: { type: 'integer', default: 30 },
  },
  required: ['human_img', 'garm_img', 'garment_des'],
};

const LIMITS = { maxOutputBytes: 1024 * 1024, maxOutputPixels: 4096 * 4096, minOutputSide: 64 };

function solid(width: number, height: number, background: string): ReturnType<typeof sharp> {
  return sharp({ create: { width, height, channels: 3, background } });
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
}

function expectEngineFailed(error: unknown, message?: RegExp): PermanentEngineError {
  expect(error).toBeInstanceOf(PermanentEngineError);
  const failure = error as PermanentEngineError;
  expect(failure.code).toBe('engine_failed');
  if (message) expect(failure.message).toMatch(message);
  return failure;
}

describe('CogServer against a fake Cog model', () => {
  let fake: FakeCog;
  let person: Buffer;
  let clothes: Buffer;
  let output: Buffer;
  let jobs = 0;

  const setting = (overrides: Partial<CogServerSetting> = {}): CogServerSetting => ({
    name: 'vton',
    kind: 'cog',
    url: fake.url,
    urls: [fake.url],
    discover: undefined,
    concurrency: 1,
    timeoutMs: 5000,
    headers: { Authorization: 'Bearer secret' },
    ...overrides,
  });
  const route = (overrides: Partial<CogRoute> = {}): CogRoute => ({
    key: 'fashion_swap_half/upper',
    tool: 'fashion_swap_half',
    generationType: 'upper',
    engine: 'vton',
    describe: {},
    kind: 'cog',
    inputs: { person: 'human_img', clothes: 'garm_img' },
    params: { category: 'upper_body', garment_des: 'a garment' },
    passGenerationType: false,
    ...overrides,
  });
  const engine = (routeOverrides: Partial<CogRoute> = {}, settingOverrides: Partial<CogServerSetting> = {}) =>
    new CogServer(setting(settingOverrides), LIMITS).engineFor(route(routeOverrides));
  const request = (overrides: Partial<EngineRequest> = {}): EngineRequest => ({
    jobId: `job-${++jobs}`,
    tool: 'fashion_swap_half',
    generationType: 'upper',
    images: { person, clothes },
    texts: {},
    ...overrides,
  });

  beforeAll(async () => {
    person = await solid(6, 8, '#cc6633').jpeg().toBuffer();
    clothes = await solid(8, 6, '#3366cc').png().toBuffer();
    output = await solid(80, 64, '#22aa44').png().toBuffer();
  });

  beforeEach(async () => {
    fake = await startFakeCog(() => ({ kind: 'succeed', image: output }), { schema: VTON_SCHEMA });
  });

  afterEach(async () => {
    await fake.close();
  });

  describe('a job', () => {
    it('sends the mapped inputs and the params under the model names, with the headers, to PUT /predictions/{job id}', async () => {
      const sut = engine();
      const job = request();

      const result = await sut.generate(job);

      expect(result).toEqual([{ kind: 'encoded', data: output }]);
      expect(fake.requests).toHaveLength(1);
      const [prediction] = fake.requests;
      expect(prediction).toMatchObject({ id: job.jobId, method: 'PUT', status: 'succeeded', dropped: [] });
      expect(prediction.images).toEqual({ human_img: sha256(person), garm_img: sha256(clothes) });
      expect(prediction.texts).toEqual({ category: 'upper_body', garment_des: 'a garment' });
      expect(prediction.generationType).toBeUndefined();
      const put = fake.calls.find((call) => call.method === 'PUT')!;
      expect(put.path).toBe(`/predictions/${job.jobId}`);
      expect(put.headers['content-type']).toBe('application/json');
      expect(put.headers['prefer']).toBeUndefined();
      expect(fake.calls.every((call) => call.headers['authorization'] === 'Bearer secret')).toBe(true);
    });

    it('sends the generation type and the tool names on the ENGINE_<TOOL> shortcut', async () => {
      fake.setSchema({
        properties: { generation_type: { type: 'string' }, clothes: { type: 'string', format: 'uri' } },
      });
      const sut = engine({
        key: 'fashion_card',
        tool: 'fashion_card',
        inputs: { clothes: 'clothes' },
        params: {},
        passGenerationType: true,
      });

      await sut.generate(request({ tool: 'fashion_card', generationType: 'product_card', images: { clothes } }));

      expect(fake.requests[0].images).toEqual({ clothes: sha256(clothes) });
      expect(fake.requests[0].generationType).toBe('product_card');
    });

    it('sends a text input as a string under its model name', async () => {
      fake.setSchema({ properties: { image: { type: 'string', format: 'uri' }, text_prompt: { type: 'string' } } });
      const sut = engine({
        key: 'enhance',
        tool: 'enhance',
        inputs: { image: 'image', prompt: 'text_prompt' },
        params: {},
      });

      await sut.generate(request({ images: { image: clothes }, texts: { prompt: 'sharper "please"' } }));

      expect(fake.requests[0].texts).toEqual({ text_prompt: 'sharper "please"' });
    });

    it.each([
      ['a URL on the server', 'url' as const],
      ['a list whose first item is a data URI', 'list' as const],
    ])('takes an output given as %s', async (_name, as) => {
      fake.behave(() => ({ kind: 'succeed', image: output, as }));

      const result = await engine().generate(request());

      expect(result).toEqual([{ kind: 'encoded', data: output }]);
    });
    it('waits for the run an earlier attempt of the job left going, instead of starting a second one beside it', async () => {
      fake.behave(() => ({ kind: 'succeed', image: output, delayMs: 1500 }));
      const job = request();
      const first = engine().generate(job);
      await fake.waitFor((f) => f.requests.length === 1, 'the first attempt to start the prediction');

      const second = await engine().generate(job);

      expect(second).toEqual([{ kind: 'encoded', data: output }]);
      await first;
      expect(fake.requests[0].repeats).toBeGreaterThanOrEqual(1);
      expect(fake.calls.filter((call) => call.status === 409)).toEqual([]);
    });
  });

  describe('seeds and variants', () => {
    const VARIANT_SCHEMA: FakeCogSchema = {
      ...VTON_SCHEMA,
      properties: { ...VTON_SCHEMA.properties, seed: { type: 'integer' }, num_outputs: { type: 'integer' } },
    };

    it("sends the seed and how many results under the route's input names, and takes each item of a list output", async () => {
      fake.setSchema(VARIANT_SCHEMA);
      // A model taking num_outputs answers a list of that many images (a `List[Path]` output).
      fake.behave((prediction) => ({ kind: 'succeed', as: 'list', count: prediction.texts['num_outputs'] as number }));
      const sut = engine({ seedInput: 'seed', outputs: { input: 'num_outputs', max: 4 } });

      const result = (await sut.generate(request({ seed: 42, outputs: 3 }))) as { kind: string; data: Buffer }[];

      expect(fake.requests[0].texts).toMatchObject({ seed: 42, num_outputs: 3 });
      expect(result.map((image) => image.kind)).toEqual(['encoded', 'encoded', 'encoded']);
      expect(new Set(result.map((image) => sha256(image.data))).size).toBe(3);
    });

    it('takes no more items of a list than the run was asked for', async () => {
      fake.behave(() => ({ kind: 'succeed', as: 'list', count: 3 }));

      const result = await engine().generate(request());

      expect(result).toHaveLength(1);
    });

    it("fails the job before any prediction when the route's seed or count input is not the model's", async () => {
      const sut = engine({ seedInput: 'sede', outputs: { input: 'num_outputs', max: 4 } });

      const failure = expectEngineFailed(await rejection(sut.generate(request({ seed: 1 }))));

      expect(failure.message).toContain('"sede" (routes.fashion_swap_half/upper.seed)');
      expect(failure.message).toContain('"num_outputs" (routes.fashion_swap_half/upper.num_outputs)');
      expect(fake.requests).toEqual([]);
    });

    it('sends neither the seed nor a count on a route that declares no input for them', async () => {
      await engine().generate(request({ seed: 42, outputs: 1 }));

      expect(Object.keys(fake.requests[0].texts).sort()).toEqual(['category', 'garment_des']);
    });
  });

  describe("the output's host", () => {
    const redirect = (to: string) => `${fake.url}/redirect?to=${encodeURIComponent(to)}`;

    it.each([
      ['an address written in its URL', () => 'https://127.0.0.1:9/out.png', /127\.0\.0\.1 is a private address/],
      ['a name that resolves to one', () => 'https://localhost:9/out.png', /localhost resolves to /],
      ["the cloud's metadata service", () => 'https://169.254.169.254/latest', /169\.254\.169\.254 is a private/],
      ['the target of a redirect from the server', () => redirect('https://localhost:9/out.png'), /localhost resolves/],
    ])('refuses an output off the server at a private address: %s', async (_case, url, reason) => {
      fake.behave(() => ({ kind: 'succeed', image: output, as: { url: url() } }));

      const failure = expectEngineFailed(await rejection(engine().generate(request())), reason);

      // The address stays in the log; the client reads plain words.
      expect(failure.clientMessage).toBeUndefined();
    });

    it('refuses a redirect from the server to plain http elsewhere', async () => {
      fake.behave(() => ({ kind: 'succeed', image: output, as: { url: redirect('http://169.254.169.254/latest') } }));

      expectEngineFailed(await rejection(engine().generate(request())), /neither on its server nor https/);
    });

    it('downloads an output on the server itself, at a loopback address, through a redirect too, with its headers', async () => {
      const job = request();
      const own = `${fake.url}/outputs/${job.jobId}.png`;
      fake.behave(() => ({ kind: 'succeed', image: output, as: { url: redirect(own) } }));

      expect(await engine().generate(job)).toEqual([{ kind: 'encoded', data: output }]);
      const download = fake.calls.find((call) => call.path === `/outputs/${job.jobId}.png`);
      expect(download?.headers['authorization']).toBe('Bearer secret');
    });
  });

  describe('the model schema', () => {
    it('fails the job naming the mapped input the model does not have, and runs nothing', async () => {
      const error = await rejection(
        engine({ inputs: { person: 'human_img', clothes: 'cloth_img' } }).generate(request()),
      );

      const failure = expectEngineFailed(error);
      expect(failure.clientMessage).toBe(
        'The model has no input "cloth_img" (routes.fashion_swap_half/upper.inputs.clothes); its inputs: human_img, garm_img, garment_des, category, steps',
      );
      // The server's address is for the log, not for clients.
      expect(failure.message).toContain(`The model at ${fake.url} has no input "cloth_img"`);
      expect(fake.requests).toHaveLength(0);
    });

    it('names a param the model does not have, and generation_type on the shortcut', async () => {
      const sut = engine({ params: { seed: 1 }, passGenerationType: true });

      const failure = expectEngineFailed(await rejection(sut.generate(request())));

      expect(failure.clientMessage).toContain(
        'has no inputs "seed" (ENGINE_FASHION_SWAP_HALF, input seed), "generation_type"',
      );
    });

    it('reads the schema once, and again on a later job when the read failed', async () => {
      fake.failSchema(503);
      const sut = engine();
      expect(await rejection(sut.generate(request()))).toBeInstanceOf(TransientEngineError);
      fake.failSchema(undefined);

      await sut.generate(request());
      await sut.generate(request());

      const schemaReads = fake.calls.filter((call) => call.path === '/openapi.json');
      expect(schemaReads.map((call) => call.status)).toEqual([503, 503, 503, 200]);
    });

    it('reads it again a minute on: a model replaced at the same URL is checked as it is now', async () => {
      const sut = engine();
      await sut.generate(request());
      // The next version of the model calls the garment cloth_img.
      const { garm_img: garment, ...others } = VTON_SCHEMA.properties;
      fake.setSchema({
        properties: { ...others, cloth_img: garment },
        required: ['human_img', 'cloth_img', 'garment_des'],
      });
      const now = Date.now();
      const clock = jest.spyOn(Date, 'now');
      try {
        // Within the minute the schema read before is trusted: the model itself refuses the input.
        clock.mockReturnValue(now + 30_000);
        expectEngineFailed(await rejection(sut.generate(request())), /HTTP 422/);
        clock.mockReturnValue(now + 61_000);

        const failure = expectEngineFailed(await rejection(sut.generate(request())));

        expect(failure.clientMessage).toContain('has no input "garm_img"');
        expect(fake.calls.filter((call) => call.path === '/openapi.json')).toHaveLength(2);
      } finally {
        clock.mockRestore();
      }
    });
  });

  describe('failures', () => {
    it("ends engine_failed with the model's own message for the client", async () => {
      fake.behave(() => ({ kind: 'fail', error: 'CUDA out of memory. Tried to allocate 2.00 GiB' }));

      const failure = expectEngineFailed(await rejection(engine().generate(request())), /Cog prediction failed: CUDA/);

      expect(failure.clientMessage).toBe('CUDA out of memory. Tried to allocate 2.00 GiB');
    });

    it("ends engine_failed with Cog's detail when it refuses the input (422)", async () => {
      const failure = expectEngineFailed(
        await rejection(engine({ params: { category: 'hats', garment_des: 'a garment' } }).generate(request())),
        /HTTP 422/,
      );

      expect(failure.clientMessage).toMatch(/^body\.input\.category: "hats" is not one of/);
      expect(fake.requests).toHaveLength(0);
    });

    it('tries a 5xx again, then gives up as transient', async () => {
      fake.behave(() => ({ kind: 'http', status: 503 }));

      const error = await rejection(engine().generate(request()));

      expect(error).toBeInstanceOf(TransientEngineError);
      expect(error).not.toBeInstanceOf(EngineTimeoutError);
      expect(fake.requests.map((prediction) => prediction.attempt)).toEqual([1, 2, 3]);
    });

    it('succeeds when a 5xx is followed by an answer', async () => {
      fake.behave((prediction) =>
        prediction.attempt === 1 ? { kind: 'http', status: 500 } : { kind: 'succeed', image: output },
      );

      expect(await engine().generate(request())).toEqual([{ kind: 'encoded', data: output }]);
    });

    it('times out a run that does not end', async () => {
      fake.behave(() => ({ kind: 'hang' }));
      const sut = engine({}, { timeoutMs: 300 });

      const error = await rejection(sut.generate(request({ signal: AbortSignal.timeout(5000) })));

      expect(error).toBeInstanceOf(EngineTimeoutError);
    });

    it('refuses an output larger than the limit', async () => {
      const big = await solid(64, 64, '#123456').png({ compressionLevel: 0 }).toBuffer();
      fake.behave(() => ({ kind: 'succeed', image: big, as: 'url' }));
      const sut = new CogServer(setting(), { ...LIMITS, maxOutputBytes: big.length - 1 }).engineFor(route());

      expectEngineFailed(await rejection(sut.generate(request())), /larger than/);
    });

    it('refuses an output of more pixels than OUTPUT_MAX_PIXELS, read from its header', async () => {
      const wide = await solid(200, 100, '#123456').png().toBuffer();
      fake.behave(() => ({ kind: 'succeed', image: wide }));
      const limited = new CogServer(setting(), { ...LIMITS, maxOutputPixels: 200 * 100 - 1 }).engineFor(route());

      const error = await rejection(limited.generate(request()));

      expectEngineFailed(error, /output is 200x100 px, more than the 19999 pixels OUTPUT_MAX_PIXELS allows/);
      expect(await engine().generate(request())).toEqual([{ kind: 'encoded', data: wide }]);
    });

    it.each([
      ['a 1x1 image', 1, 1],
      ['a strip thinner than an upload may be', 400, LIMITS.minOutputSide - 1],
    ])('refuses %s, which is no result', async (_case, width, height) => {
      const odd = await solid(width, height, '#123456').png().toBuffer();
      fake.behave(() => ({ kind: 'succeed', image: odd }));

      const error = await rejection(engine().generate(request()));

      expectEngineFailed(error, new RegExp(`output is ${width}x${height} px`));
      expect((error as PermanentEngineError).clientMessage).toBe(
        `The model made a ${width}x${height} px image, which is no result.`,
      );
    });

    it('is transient when the server is down', async () => {
      const sut = engine();
      await fake.close();

      const error = await rejection(sut.generate(request()));

      expect(error).toBeInstanceOf(TransientEngineError);
      expect((error as Error).message).toMatch(/ECONNREFUSED/);
      fake = await startFakeCog();
    });
  });

  describe('cancel', () => {
    it('sends POST /predictions/{id}/cancel once the signal fires, and the run ends canceled', async () => {
      fake.behave(() => ({ kind: 'hang' }));
      const stop = new AbortController();
      const job = request({ signal: stop.signal });
      const running = rejection(engine().generate(job));
      await fake.waitFor((f) => f.requests.length === 1, 'the prediction to start');

      stop.abort(new Error('item canceled'));
      const error = await running;

      expect((error as Error).message).toBe('item canceled');
      expect(fake.cancels).toEqual([job.jobId]);
      expect(fake.requests[0]).toMatchObject({ id: job.jobId, status: 'canceled' });
    });
  });

  describe('progress', () => {
    it('reports none: a synchronous call tells nothing', async () => {
      fake.behave(() => ({ kind: 'succeed', image: output, delayMs: 200 }));
      const reported: number[] = [];

      await engine().generate(request({ onProgress: (fraction) => reported.push(fraction) }));

      expect(reported).toEqual([]);
    });
  });

  describe('probe', () => {
    it('is up while the model is ready or busy, down once the server is gone', async () => {
      const sut = new CogServer(setting(), LIMITS);
      expect(await sut.probe(AbortSignal.timeout(2000))).toBe(true);
      fake.behave(() => ({ kind: 'hang' }));
      const stop = new AbortController();
      const running = rejection(sut.engineFor(route()).generate(request({ signal: stop.signal })));
      await fake.waitFor((f) => f.inFlight().length === 1, 'the prediction to start');

      expect(await sut.probe(AbortSignal.timeout(2000))).toBe(true);

      stop.abort(new Error('done'));
      await running;
      await fake.close();
      expect(await sut.probe(AbortSignal.timeout(2000)).catch(() => false)).toBe(false);
      fake = await startFakeCog();
    });
  });
});
