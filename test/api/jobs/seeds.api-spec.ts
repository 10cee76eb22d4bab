import { existsSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, CREATE_PATH, type FormValue, type HistoryItemBody, type ProblemBody } from '../../support/client.js';
import { expectMatchesContract } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { type FakeCog, type FakeCogRequest, sha256, startFakeCog } from '../../support/fake-cog.js';
import { FAST_TIMINGS, uniqueImage } from '../../support/harness.js';
import { makePerson } from '../../support/jobs.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';

/** A model that takes a seed and how many results, as SDXL's Cog container does, and the tools' image inputs. */
const SCHEMA = {
  properties: {
    human_img: { type: 'string' as const, format: 'uri' },
    garm_img: { type: 'string' as const, format: 'uri' },
    fabric: { type: 'string' as const, format: 'uri' },
    target: { type: 'string' as const, format: 'uri' },
    seed: { type: 'integer' as const },
    num_outputs: { type: 'integer' as const },
  },
};

/**
 * fashion_swap_half/upper: the model makes up to two results a run; fabric: one a run, run again for each; fashion_swap:
 * a model that takes neither; fashion_card: the local engine.
 */
const ROUTING = (url: string): string => `
engines:
  sdxl:
    kind: cog
    url: ${url}
    concurrency: 2
routes:
  fashion_swap_half/upper:
    engine: sdxl
    inputs: { person: human_img, clothes: garm_img }
    seed: seed
    num_outputs: num_outputs
    max_outputs: 2
  fabric:
    engine: sdxl
    inputs: { fabric: fabric, target: target }
    seed: seed
    repeat: true
  fashion_swap:
    engine: sdxl
    inputs: { person: human_img, clothes: garm_img }
`;

describe('seeds and variants (seed, num_outputs, outputs[])', () => {
  let env: TestEnvironment;
  let fake: FakeCog;
  let sut: RunningService;
  let client: Client;
  let person: Buffer;

  const image = (data: Buffer, name: string): FormValue => ({
    data,
    filename: `${name}.png`,
    contentType: 'image/png',
  });
  const predictionsFor = (clothes: Buffer): FakeCogRequest[] =>
    fake.requests.filter((request) => Object.values(request.images).includes(sha256(clothes)));

  async function refused(fields: Record<string, FormValue>): Promise<{ status: number; body: ProblemBody }> {
    const response = await client.postJob(fields);
    const body = (await expectMatchesContract(response, 'POST', CREATE_PATH)) as ProblemBody;
    return { status: response.status, body };
  }

  /** Every result's two files, as a client downloads them: status and content type of each. */
  async function download(item: HistoryItemBody): Promise<string[]> {
    const answers = await Promise.all(
      item.outputs!.flatMap((output) =>
        [output.stock_url, output.preview_url].map(async (path) => {
          const response = await fetch(new URL(path, `${sut.baseUrl}/`));
          await response.arrayBuffer();
          return `${response.status} ${response.headers.get('content-type')?.split(';')[0]}`;
        }),
      ),
    );
    return answers;
  }

  beforeAll(async () => {
    person = await makePerson('png');
    // A model with a num_outputs input answers a list of that many images, each of its own colour.
    fake = await startFakeCog(
      (request) => ({ kind: 'succeed', as: 'list', count: (request.texts['num_outputs'] as number | undefined) ?? 1 }),
      { schema: SCHEMA, concurrency: 2 },
    );
    env = await createTestEnvironment();
    const folder = await mkdtemp(join(tmpdir(), 'seeds-'));
    const routing = join(folder, 'engines.yaml');
    await writeFile(routing, ROUTING(fake.url));
    sut = await startService({ ...env.serviceEnv, ...FAST_TIMINGS, ROLE: 'all', ENGINES_FILE: routing });
    client = new Client(sut.baseUrl, await createUserWithKey(env.databaseUrl));
  }, 60_000);

  afterAll(async () => {
    await sut?.stop('SIGTERM');
    await fake?.close();
    await env?.dispose();
  }, 60_000);

  it("makes num_outputs results in one run of a model that takes them, each served and signed, the first as the item's own", async () => {
    const clothes = await uniqueImage();
    const id = await client.createJob({
      tool: 'fashion_swap_half',
      generation_type: 'upper',
      person: image(person, 'person'),
      clothes: image(clothes, 'clothes'),
      seed: '4242',
      num_outputs: '2',
    });

    await client.waitForFinal(id);
    const { body: item } = await client.get(id);

    expect(predictionsFor(clothes).map((prediction) => prediction.texts)).toEqual([{ seed: 4242, num_outputs: 2 }]);
    expect(item.outputs).toHaveLength(2);
    expect(item.outputs!.map((output) => output.seed)).toEqual([4242, 4242]);
    expect(item.outputs![0]).toMatchObject({
      preview_url: item.preview_url,
      stock_url: item.stock_url,
      output_url: item.output_url,
    });
    expect(item.outputs![1].stock_url).toMatch(new RegExp(`^media/${id}/stock-1\\.jpg\\?expires=\\d+&signature=`));
    expect(item.outputs![1].preview_url).toMatch(new RegExp(`^media/${id}/preview-1\\.webp\\?expires=`));
    expect(await download(item)).toEqual(['200 image/jpeg', '200 image/webp', '200 image/jpeg', '200 image/webp']);
  }, 60_000);

  it('removes every result with the item', async () => {
    const clothes = await uniqueImage();
    const id = await client.createJob({
      tool: 'fashion_swap_half',
      generation_type: 'upper',
      person: image(person, 'person'),
      clothes: image(clothes, 'clothes'),
      num_outputs: '2',
    });
    const item = await client.waitForFinal(id);
    const { body: complete } = await client.get(id);
    expect(item.status).toBe('complete');
    expect(existsSync(join(env.serviceEnv.MEDIA_ROOT, id, 'stock-1.jpg'))).toBe(true);

    expect((await client.delete(id)).status).toBe(204);

    expect(existsSync(join(env.serviceEnv.MEDIA_ROOT, id))).toBe(false);
    expect(await download(complete)).toEqual([
      '404 application/problem+json',
      '404 application/problem+json',
      '404 application/problem+json',
      '404 application/problem+json',
    ]);
  }, 60_000);

  it('runs a model that makes one result a run once for each, with seeds seed, seed+1, ..., drawing the seed when none is sent', async () => {
    const fabric = await uniqueImage();
    const id = await client.createJob({
      tool: 'fabric',
      fabric: image(fabric, 'fabric'),
      target: image(await uniqueImage(), 'target'),
      num_outputs: '3',
    });

    const item = await client.waitForFinal(id);

    expect(item.status).toBe('complete');
    const seeds = predictionsFor(fabric).map((prediction) => prediction.texts['seed'] as number);
    expect(seeds).toHaveLength(3);
    expect(seeds).toEqual([seeds[0], seeds[0] + 1, seeds[0] + 2]);
    expect((await client.get(id)).body.outputs!.map((output) => output.seed)).toEqual(seeds);
    expect(predictionsFor(fabric).every((prediction) => prediction.texts['num_outputs'] === undefined)).toBe(true);
  }, 60_000);

  it.each([
    ['a seed', { seed: '7' }, 'seed'],
    ['two results', { num_outputs: '2' }, 'num_outputs'],
  ])(
    'refuses %s for a model that takes none: 422 unsupported_option, before anything runs',
    async (_case, extra, field) => {
      const clothes = await uniqueImage();

      const { status, body } = await refused({
        tool: 'fashion_swap',
        person: image(person, 'person'),
        clothes: image(clothes, 'clothes'),
        ...extra,
      });

      expect(status).toBe(422);
      expect(body).toMatchObject({ code: 'unsupported_option', errors: [{ field }] });
      expect(predictionsFor(clothes)).toEqual([]);
      expect((await client.list()).body.items.every((item) => item.tool !== 'fashion_swap')).toBe(true);
    },
  );

  it('refuses more results than the model makes at once: 422 unsupported_option naming num_outputs', async () => {
    const { status, body } = await refused({
      tool: 'fashion_swap_half',
      generation_type: 'upper',
      person: image(person, 'person'),
      clothes: image(await uniqueImage(), 'clothes'),
      num_outputs: '3',
    });

    expect(status).toBe(422);
    expect(body).toMatchObject({ code: 'unsupported_option', errors: [{ field: 'num_outputs' }] });
  });

  it.each([
    ['a seed past 2^32 - 1', { seed: '4294967296' }, 'seed'],
    ['a negative seed', { seed: '-1' }, 'seed'],
    ['a seed that is no number', { seed: 'lucky' }, 'seed'],
    ['no results', { num_outputs: '0' }, 'num_outputs'],
    ['five results', { num_outputs: '5' }, 'num_outputs'],
  ])('refuses %s: 400 validation_failed naming the field', async (_case, extra, field) => {
    const { status, body } = await refused({ tool: 'fashion_card', clothes: image(person, 'clothes'), ...extra });

    expect(status).toBe(400);
    expect(body).toMatchObject({ code: 'validation_failed', errors: [{ field }] });
  });

  it('takes a seed in JSON as a number, and refuses one sent as text', async () => {
    const { status, body } = await client.createJson({
      tool: 'fashion_card',
      inputs: { clothes: 'https://images.example.com/shirt.jpg' },
      seed: '7',
    });

    expect(status).toBe(400);
    expect(body).toMatchObject({ code: 'validation_failed', errors: [{ field: 'seed' }] });
  });

  it('gives the same result for the same seed and inputs on the local engine, which makes one result', async () => {
    const clothes = await uniqueImage();
    const job = { tool: 'fashion_card', clothes: image(clothes, 'clothes'), seed: '99' };

    const items = [];
    for (const id of [await client.createJob(job), await client.createJob(job)])
      items.push(await client.waitForFinal(id));

    expect(items.map((item) => item.outputs!.map((output) => output.seed))).toEqual([[99], [99]]);
    const stocks = await Promise.all(
      items.map(async (item) =>
        Buffer.from(await (await fetch(new URL(item.stock_url!, `${sut.baseUrl}/`))).arrayBuffer()),
      ),
    );
    expect(sha256(stocks[0])).toBe(sha256(stocks[1]));
    const { status, body } = await refused({ ...job, num_outputs: '2' });
    expect(status).toBe(422);
    expect(body).toMatchObject({ code: 'unsupported_option', errors: [{ field: 'num_outputs' }] });
  }, 60_000);
});
