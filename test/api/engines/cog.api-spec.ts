import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { Client, createJob, type HistoryItemBody, waitForFinal } from '../../support/client.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { type FakeCog, type FakeCogAnswer, type FakeCogRequest, sha256, startFakeCog } from '../../support/fake-cog.js';
import { expectCompleteWithOutputs, FAST_TIMINGS, getItem, uniqueImage } from '../../support/harness.js';
import { makePerson } from '../../support/jobs.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';

/** The IDM-VTON model's inputs, as its Cog container publishes them. */
const VTON_SCHEMA = {
  properties: {
    human_img: { type: 'string' as const, format: 'uri' },
    garm_img: { type: 'string' as const, format: 'uri' },
    garment_des: { type: 'string' as const },
    category: { type: 'string' as const, enum: ['upper_body', 'lower_body', 'dresses'] },
    denoise_steps: { type: 'integer' as const, default: 30 },
  },
  required: ['human_img', 'garm_img', 'garment_des'],
};

const ROUTING = (url: string): string => `
engines:
  vton:
    kind: cog
    url: ${url}
routes:
  fashion_swap_half/upper:
    engine: vton
    inputs: { person: human_img, clothes: garm_img }
    params: { category: upper_body, garment_des: a garment }
`;

const RESULT_COLOUR = { r: 0x22, g: 0xaa, b: 0x44 };

describe('the cog engine kind, through the service', () => {
  let env: TestEnvironment;
  let fake: FakeCog;
  let sut: RunningService;
  let key: string;
  let person: Buffer;
  let result: Buffer;
  /** What the fake does with the job whose garment image has this sha256. */
  const plans = new Map<string, FakeCogAnswer>();

  async function submit(answer: FakeCogAnswer, photo = person): Promise<{ id: string; clothes: Buffer }> {
    const clothes = await uniqueImage();
    plans.set(sha256(clothes), answer);
    const id = await createJob(sut.baseUrl, key, {
      tool: 'fashion_swap_half',
      generation_type: 'upper',
      person: { data: photo, filename: 'person.jpg', contentType: 'image/jpeg' },
      clothes: { data: clothes, filename: 'clothes.png', contentType: 'image/png' },
    });
    return { id, clothes };
  }

  async function item(id: string): Promise<HistoryItemBody> {
    return (await getItem(sut.baseUrl, key, id)).body;
  }

  const predictionFor = (clothes: Buffer): FakeCogRequest | undefined => fake.requestsFor(clothes)[0];

  beforeAll(async () => {
    person = await makePerson('jpeg');
    result = await sharp({ create: { width: 96, height: 128, channels: 3, background: RESULT_COLOUR } })
      .png()
      .toBuffer();
    fake = await startFakeCog(
      (request) => plans.get(request.images['garm_img'] ?? '') ?? { kind: 'succeed', image: result },
      { schema: VTON_SCHEMA },
    );
    env = await createTestEnvironment();
    const folder = await mkdtemp(join(tmpdir(), 'cog-e2e-'));
    const routing = join(folder, 'engines.yaml');
    await writeFile(routing, ROUTING(fake.url));
    sut = await startService({ ...env.serviceEnv, ...FAST_TIMINGS, ROLE: 'all', ENGINES_FILE: routing });
    key = await createUserWithKey(env.databaseUrl);
  }, 60_000);

  afterAll(async () => {
    await sut?.stop('SIGTERM');
    await fake?.close();
    await env?.dispose();
  }, 60_000);

  it("completes a job with the model's output, sent the mapped names and the params", async () => {
    const { id, clothes } = await submit({ kind: 'succeed', image: result });

    const done = await waitForFinal(sut.baseUrl, key, id);

    const outputs = await expectCompleteWithOutputs(sut.baseUrl, done);
    const { data, info } = await sharp(outputs.stock).raw().toBuffer({ resolveWithObject: true });
    const centre = (Math.floor(info.height / 2) * info.width + Math.floor(info.width / 2)) * info.channels;
    const [r, g, b] = data.subarray(centre, centre + 3);
    // JPEG keeps a flat colour within a few levels.
    for (const [got, want] of [
      [r, RESULT_COLOUR.r],
      [g, RESULT_COLOUR.g],
      [b, RESULT_COLOUR.b],
    ]) {
      expect(Math.abs(got - want)).toBeLessThanOrEqual(4);
    }
    const prediction = predictionFor(clothes)!;
    expect(prediction.id).toBe(id);
    expect(prediction.images).toEqual({ human_img: sha256(person), garm_img: sha256(clothes) });
    expect(prediction.texts).toEqual({ category: 'upper_body', garment_des: 'a garment' });
    expect(prediction.dropped).toEqual([]);
    expect(prediction.generationType).toBeUndefined();
  }, 60_000);

  it("sends a phone's sideways photo to the model upright, without where and with what it was taken", async () => {
    // As a phone stores a portrait: landscape pixels, EXIF orientation 6 (turn 90° clockwise), camera and GPS.
    const phonePhoto = await sharp(person)
      .rotate(-90)
      .jpeg()
      .withExif({ IFD0: { Make: 'PhonePhone' }, IFD3: { GPSLatitudeRef: 'N', GPSLatitude: '48/1 51/1 24/1' } })
      .withMetadata({ orientation: 6 })
      .toBuffer();
    const { id, clothes } = await submit({ kind: 'succeed', image: result }, phonePhoto);

    expect((await waitForFinal(sut.baseUrl, key, id)).status).toBe('complete');

    const sent = fake.imageOf(predictionFor(clothes)!.images['human_img'])!;
    const [upright, uploaded] = await Promise.all([sharp(sent).metadata(), sharp(person).metadata()]);
    expect(upright).toMatchObject({ format: 'jpeg', width: uploaded.width, height: uploaded.height });
    expect(upright.exif).toBeUndefined();
    expect(sent.includes('PhonePhone')).toBe(false);
  }, 60_000);

  it('shows no progress while the model runs, since a synchronous Cog call tells none', async () => {
    const { id, clothes } = await submit({ kind: 'succeed', image: result, delayMs: 1500 });
    await fake.waitFor(() => predictionFor(clothes) !== undefined, 'the model to start the job');

    const running = await item(id);

    expect(running).toMatchObject({ status: 'pending', progress: null });
    expect(await waitForFinal(sut.baseUrl, key, id)).toMatchObject({ status: 'complete', progress: 1 });
  }, 60_000);

  it('stops the model when a running job is canceled, and the item ends canceled at once', async () => {
    const { id, clothes } = await submit({ kind: 'hang' });
    await fake.waitFor(() => predictionFor(clothes) !== undefined, 'the model to start the job');

    const response = await new Client(sut.baseUrl, key).cancel(id);

    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ status: 'error', error: { code: 'canceled' } });
    await fake.waitFor((f) => f.cancels.includes(id), 'the cancel to reach the model');
    await fake.waitFor(() => predictionFor(clothes)!.status === 'canceled', 'the prediction to end canceled');
    expect(await item(id)).toMatchObject({ status: 'error', error: { code: 'canceled' } });
  }, 60_000);

  it("ends engine_failed with the model's own message when the model fails", async () => {
    const { id } = await submit({ kind: 'fail', error: 'CUDA out of memory. Tried to allocate 2.00 GiB' });

    const failed = await waitForFinal(sut.baseUrl, key, id);

    expect(failed).toMatchObject({
      status: 'error',
      error: { code: 'engine_failed', message: 'CUDA out of memory. Tried to allocate 2.00 GiB' },
    });
  }, 60_000);
});
