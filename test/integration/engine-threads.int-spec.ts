/**
 * The local engine on worker threads (the built dist/, as the worker runs it): output files identical to the
 * in-process engine's rendered result, jobs side by side, and errors that keep what the processor decides by.
 */
import { createHash } from 'node:crypto';
import sharp from 'sharp';
import type { Engine, EngineImage, EngineRequest } from '../../src/engines/index.js';
import type { RenderedOutputs } from '../../src/engines/index.js';

/** The local engine makes one image a run. */
interface LocalEngine extends Engine {
  generate(request: EngineRequest): Promise<EngineImage>;
}

interface InProcessEngine {
  LocalEngine: new (options?: { limitInputPixels?: number }) => LocalEngine;
}
interface ThreadedEngine {
  ThreadedLocalEngine: new (threads: number, limitInputPixels: number) => LocalEngine & { close(): Promise<void> };
}
interface EngineErrors {
  PermanentEngineError: new (...args: never[]) => Error & { code: string };
}
interface Renderer {
  renderOutputs: (image: EngineImage, limitInputPixels: number) => Promise<RenderedOutputs>;
}

const LIMIT = 40_000_000;
const dist = (path: string) => import(new URL(`../../dist/${path}`, import.meta.url).href);

let inProcess: InProcessEngine;
let engines: ThreadedEngine;
let errors: EngineErrors;
let renderer: Renderer;
let sut: InstanceType<ThreadedEngine['ThreadedLocalEngine']>;
let clothes: Buffer;

const card = (images: Record<string, Buffer> = { clothes }, signal?: AbortSignal): EngineRequest => ({
  jobId: 'job-1',
  tool: 'fashion_card',
  generationType: 'product_card',
  images,
  texts: {},
  signal,
});
const digest = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
/** 11 megapixels: a job that runs for a good part of a second. */
const largeClothes = () =>
  sharp({ create: { width: 3000, height: 3750, channels: 3, background: '#f4f4f4' } })
    .composite([
      {
        input: Buffer.from(
          '<svg width="3000" height="3750"><rect x="700" y="600" width="1600" height="2500" fill="#2a5d9f"/></svg>',
        ),
      },
    ])
    .jpeg()
    .toBuffer();

beforeAll(async () => {
  inProcess = (await dist('engines/in-process.js')) as InProcessEngine;
  engines = (await dist('engines/index.js')) as ThreadedEngine;
  errors = (await dist('engines/index.js')) as EngineErrors;
  renderer = (await dist('engines/index.js')) as Renderer;
  clothes = await sharp({ create: { width: 400, height: 500, channels: 3, background: '#f4f4f4' } })
    .composite([
      {
        input: Buffer.from(
          '<svg width="400" height="500"><rect x="90" y="80" width="220" height="340" fill="#2a5d9f"/></svg>',
        ),
      },
    ])
    .jpeg()
    .toBuffer();
  sut = new engines.ThreadedLocalEngine(2, LIMIT);
});

afterAll(async () => {
  await sut.close();
});

it("renders the very files of the in-process engine's result, for jobs run side by side", async () => {
  const expected = await renderer.renderOutputs(
    await new inProcess.LocalEngine({ limitInputPixels: LIMIT }).generate(card()),
    LIMIT,
  );

  const results = await Promise.all([1, 2, 3, 4].map(() => sut.generate(card())));

  const files = (result: EngineImage) =>
    result.kind === 'rendered'
      ? Object.entries(result.outputs).map(([name, bytes]) => [name, Buffer.isBuffer(bytes), digest(bytes)])
      : result.kind;
  expect(results.map(files)).toEqual(
    results.map(() => [
      ['stock', true, digest(expected.stock)],
      ['preview', true, digest(expected.preview)],
    ]),
  );
}, 60_000);

it('fails an input that does not decode as a PermanentEngineError invalid_image', async () => {
  const failure = await sut
    .generate(card({ clothes: Buffer.from('not an image at all') }))
    .catch((error: unknown) => error);

  expect(failure).toBeInstanceOf(errors.PermanentEngineError);
  expect(failure).toMatchObject({ code: 'invalid_image' });
});

it('does not start a job whose signal has fired, failing with the signal reason', async () => {
  const controller = new AbortController();
  const job = sut.generate(card({ clothes }, controller.signal));
  controller.abort(new DOMException('The operation timed out.', 'TimeoutError'));

  await expect(job).rejects.toMatchObject({ name: 'TimeoutError' });
});

it('stops a running job at its next step when its signal fires, and the thread keeps serving', async () => {
  const large = await largeClothes();
  const controller = new AbortController();
  const reports: number[] = [];
  // Fired as the thread reports its first step (the inputs decoded): the abort reaches it mid-job.
  const onProgress = (fraction: number) => {
    reports.push(fraction);
    controller.abort(new Error('worker shutting down'));
  };

  await expect(sut.generate({ ...card({ clothes: large }, controller.signal), onProgress })).rejects.toThrow(
    'worker shutting down',
  );
  // Stopped before its image was composed (the last steps report 0.9 and more).
  expect(reports.length).toBeGreaterThanOrEqual(1);
  expect(Math.max(...reports)).toBeLessThan(0.9);

  const next: number[] = [];
  await expect(sut.generate({ ...card(), onProgress: (fraction) => next.push(fraction) })).resolves.toMatchObject({
    kind: 'rendered',
  });
  expect(next).toEqual([...next].sort((a, b) => a - b));
  expect(Math.max(...next)).toBeGreaterThanOrEqual(0.9);
  expect(Math.max(...next)).toBeLessThan(1);
}, 60_000);

it('fails a job still running when the engine is closed', async () => {
  const engine = new engines.ThreadedLocalEngine(1, LIMIT);
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  const job = engine.generate({ ...card({ clothes: await largeClothes() }), onProgress: () => started() });
  await running;
  const outcome = expect(job).rejects.toThrow('the engine thread was stopped');

  await engine.close();

  await outcome;
}, 60_000);
