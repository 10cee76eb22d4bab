import { randomUUID } from 'node:crypto';
import sharp from 'sharp';
import { CARD_HEIGHT, CARD_WIDTH } from '../../../src/engines/index.js';
import { expectMatchesContract } from '../../support/contract.js';
import { imageInputsOf, makeImage, makePerson, PERSON_SIZE, withLeadingMetadata } from '../../support/jobs.js';
import { signedPathOf, unsigned } from '../../support/media.js';
import { serviceForBlock } from '../../support/service-block.js';
import { createUserWithKey } from '../../support/service.js';
import { file, UUID } from '../../support/uploads.js';
import {
  Client,
  CREATE_PATH,
  type FormValue,
  type HistoryItemBody,
  type JobAcceptedBody,
  postJob,
  waitForFinal,
} from '../../support/client.js';

/** Where the results are said to live: the trailing slash shows the base URL is normalised. */
const PUBLIC_BASE_URL = 'https://images.example.test/';
const JOB_TIMEOUT_MS = 60_000;
/** Shorter than the test's timeout, so a job that never finishes fails with its last state. */
const POLL_TIMEOUT_MS = 45_000;

type Size = { width: number; height: number };

/** Inputs of distinct sizes, so the stock image's size tells which input it was built on. */
const SIZES: Record<string, Size> = {
  clothes: { width: 360, height: 420 },
  person: PERSON_SIZE,
  room: { width: 900, height: 600 },
  furniture: { width: 300, height: 300 },
  fabric: { width: 256, height: 256 },
  target: { width: 640, height: 480 },
  image: { width: 700, height: 500 },
};

async function png(name: string, color = '#3a6ea5'): Promise<FormValue> {
  if (name === 'person') return file(await makePerson('png'), 'person.png', 'image/png');
  const { width, height } = SIZES[name];
  return file(await makeImage(width, height, 'png', color), `${name}.png`, 'image/png');
}

interface Variant {
  tool: string;
  /** Sent as `generation_type` when given; otherwise the tool's default applies. */
  sent?: string;
  generationType: string;
  texts?: Record<string, string>;
  /** Size of the full-resolution result. */
  stock: Size;
}

const VARIANTS: Variant[] = [
  { tool: 'fashion_swap', generationType: 'fashion_swap_full', stock: SIZES.person },
  {
    tool: 'fashion_swap_half',
    sent: 'upper',
    generationType: 'upper',
    stock: SIZES.person,
  },
  {
    tool: 'fashion_swap_half',
    sent: 'lower',
    generationType: 'lower',
    stock: SIZES.person,
  },
  {
    tool: 'fashion_card',
    generationType: 'product_card',
    stock: { width: CARD_WIDTH, height: CARD_HEIGHT },
  },
  {
    tool: 'lengerie',
    sent: 'lengerie_swap',
    generationType: 'lengerie_swap',
    stock: SIZES.person,
  },
  { tool: 'furniture', generationType: 'furniture_placement', stock: SIZES.room },
  { tool: 'fabric', generationType: 'fabric_retexture', stock: SIZES.target },
  {
    tool: 'default',
    generationType: 'enhance',
    texts: { prompt: 'Brighter, warmer light; keep the colours natural.' },
    stock: SIZES.image,
  },
];

async function fieldsFor(variant: Variant): Promise<Record<string, FormValue>> {
  const colors = ['#a53a3a', '#3a6ea5'];
  const fields: Record<string, FormValue> = { tool: variant.tool };
  if (variant.sent) fields.generation_type = variant.sent;
  for (const [index, name] of imageInputsOf(variant.tool).entries()) fields[name] = await png(name, colors[index % 2]);
  return { ...fields, ...variant.texts };
}

async function expectAccepted(response: Response): Promise<JobAcceptedBody> {
  expect(response.status).toBe(202);
  const body = (await expectMatchesContract(response, 'POST', CREATE_PATH)) as JobAcceptedBody;
  expect(body.history_item_id).toMatch(UUID);
  expect(body).toEqual({
    history_item_id: body.history_item_id,
    preview_image: expect.stringMatching(signedPathOf(body.history_item_id, 'preview.webp')),
    stock_image: expect.stringMatching(signedPathOf(body.history_item_id, 'stock.jpg')),
    status: 'pending',
  });
  expect(response.headers.get('location')).toBe(`/user/generation-history/${body.history_item_id}`);
  return body;
}

describe('job creation with a worker running', () => {
  const block = serviceForBlock({ PUBLIC_BASE_URL });
  let apiKey: string;
  let otherKey: string;

  beforeAll(async () => {
    apiKey = await createUserWithKey(block.env.databaseUrl);
    otherKey = await createUserWithKey(block.env.databaseUrl);
  }, 60_000);

  const getItem = (id: string, key = apiKey) => new Client(block.sut.baseUrl, key).get(id);

  /** Polls to a final status, then reads the item once more through the contract. */
  async function completedItem(id: string): Promise<HistoryItemBody> {
    const final = await waitForFinal(block.sut.baseUrl, apiKey, id, POLL_TIMEOUT_MS);
    expect(final).toMatchObject({ status: 'complete', error: null });
    const answer = await getItem(id);
    expect(answer.status).toBe(200);
    return answer.body;
  }

  async function getMedia(path: string, contentType: string): Promise<Buffer> {
    const response = await fetch(`${block.sut.baseUrl}/${path}`);
    expect(response.status).toBe(200);
    await expectMatchesContract(response, 'GET', '/media/{id}/{file}');
    expect(response.headers.get('content-type')).toBe(contentType);
    expect(response.headers.get('x-content-type-options')).toBe('nosniff');
    // Kept by the client alone, and no longer than the signed URL works (an hour here): a delete reaches every cache.
    const cacheControl = response.headers.get('cache-control') ?? '';
    expect(cacheControl).toMatch(/^private, max-age=\d+$/);
    const maxAge = Number(/max-age=(\d+)/.exec(cacheControl)![1]);
    expect(maxAge).toBeGreaterThan(0);
    expect(maxAge).toBeLessThanOrEqual(3600);
    return Buffer.from(await response.arrayBuffer());
  }

  async function stockBytes(accepted: JobAcceptedBody): Promise<Buffer> {
    await completedItem(accepted.history_item_id);
    return getMedia(accepted.stock_image, 'image/jpeg');
  }

  describe.each(VARIANTS)('$tool, generation type $generationType', (variant) => {
    it(
      'is accepted as pending, completes, and serves a WebP preview and a full-resolution JPEG',
      async () => {
        const response = await postJob(block.sut.baseUrl, apiKey, await fieldsFor(variant));
        const accepted = await expectAccepted(response);

        const item = await completedItem(accepted.history_item_id);

        expect(item).toEqual({
          history_item_id: accepted.history_item_id,
          tool: variant.tool,
          generation_type: variant.generationType,
          status: 'complete',
          // The paths creation named, signed afresh for this read.
          preview_url: expect.stringMatching(signedPathOf(accepted.history_item_id, 'preview.webp')),
          stock_url: expect.stringMatching(signedPathOf(accepted.history_item_id, 'stock.jpg')),
          output_url: `https://images.example.test/${item.stock_url}`,
          like: null,
          error: null,
          created_at: expect.any(String),
          updated_at: expect.any(String),
          completed_at: expect.any(String),
          progress: 1,
          // Kept until deleted: this service runs without HISTORY_RETENTION.
          expires_at: null,
          media_urls_expire_at: expect.any(String),
          // The one result the local engine makes, with the seed drawn for the job.
          outputs: [
            {
              preview_url: item.preview_url,
              stock_url: item.stock_url,
              output_url: item.output_url,
              seed: expect.any(Number),
            },
          ],
          webhook: null,
          started_at: expect.any(String),
          queue_position: null,
          metrics: { queue_seconds: expect.any(Number), run_seconds: expect.any(Number) },
        });
        expect([unsigned(item.preview_url!), unsigned(item.stock_url!)]).toEqual([
          unsigned(accepted.preview_image),
          unsigned(accepted.stock_image),
        ]);
        // MEDIA_URL_TTL is its default, an hour, from the read (which came after the job completed).
        const expires = Number(new URL(item.stock_url!, 'http://x/').searchParams.get('expires'));
        expect(new Date(expires * 1000).toISOString()).toBe(item.media_urls_expire_at);
        expect(expires * 1000).toBeGreaterThanOrEqual(Date.parse(item.completed_at!) + 3_600_000 - 1000);
        const created = Date.parse(item.created_at);
        expect(Date.parse(item.completed_at as string)).toBeGreaterThanOrEqual(created);
        expect(Date.parse(item.updated_at)).toBeGreaterThanOrEqual(created);

        const stock = await sharp(await getMedia(accepted.stock_image, 'image/jpeg')).metadata();
        expect({ format: stock.format, width: stock.width, height: stock.height }).toEqual({
          format: 'jpeg',
          ...variant.stock,
        });
        const preview = await sharp(await getMedia(accepted.preview_image, 'image/webp')).metadata();
        expect(preview.format).toBe('webp');
        expect(Math.max(preview.width, preview.height)).toBeLessThanOrEqual(512);
        // The preview shows the whole result: same proportions, give or take rounding.
        expect(Math.abs(preview.width / preview.height - stock.width / stock.height)).toBeLessThan(0.01);
      },
      JOB_TIMEOUT_MS,
    );
  });

  it('accepts the creation path without its trailing slash', async () => {
    const fields = await fieldsFor(VARIANTS[0]);

    const response = await postJob(block.sut.baseUrl, apiKey, fields, {}, '/generation/generate_image_v2');

    const accepted = await expectAccepted(response);
    const item = await getItem(accepted.history_item_id);
    expect(item.status).toBe(200);
  });

  it(
    'gives the same stock image for the same inputs (deterministic)',
    async () => {
      const fields = await fieldsFor(VARIANTS[0]);

      const first = await expectAccepted(await postJob(block.sut.baseUrl, apiKey, fields));
      const second = await expectAccepted(await postJob(block.sut.baseUrl, apiKey, fields));

      expect(second.history_item_id).not.toBe(first.history_item_id);
      const [a, b] = await Promise.all([stockBytes(first), stockBytes(second)]);
      expect(a.equals(b)).toBe(true);
    },
    JOB_TIMEOUT_MS,
  );

  it(
    'accepts JPEG and WebP inputs, recognised by their bytes whatever their names and declared types',
    async () => {
      const { width, height } = SIZES.person;
      const response = await postJob(block.sut.baseUrl, apiKey, {
        tool: 'fashion_swap',
        clothes: file(await makeImage(360, 420, 'jpeg', '#a53a3a'), 'clothes.png', 'image/png'),
        person: file(await makePerson('webp'), 'person.jpg', 'application/octet-stream'),
      });

      const accepted = await expectAccepted(response);
      const stock = await sharp(await stockBytes(accepted)).metadata();
      expect([stock.format, stock.width, stock.height]).toEqual(['jpeg', width, height]);
    },
    JOB_TIMEOUT_MS,
  );

  it(
    'reads the size of a JPEG whose header lies behind 150 KB of metadata, and of a WebP of over 64 KiB',
    async () => {
      const { width, height } = SIZES.person;
      const clothes = withLeadingMetadata(await makeImage(360, 420, 'jpeg', '#a53a3a'), 150_000);
      const person = await makePerson('webp', { grain: true });
      expect(person.length).toBeGreaterThan(64 * 1024);

      const accepted = await expectAccepted(
        await postJob(block.sut.baseUrl, apiKey, {
          tool: 'fashion_swap',
          clothes: file(clothes, 'clothes.jpg', 'image/jpeg'),
          person: file(person, 'person.webp', 'image/webp'),
        }),
      );

      const stock = await sharp(await stockBytes(accepted)).metadata();
      expect([stock.format, stock.width, stock.height]).toEqual(['jpeg', width, height]);
    },
    JOB_TIMEOUT_MS,
  );

  it('accepts a prompt of exactly 1000 characters, also when they are not ASCII', async () => {
    // The default tool is the one with a prompt.
    const fields = await fieldsFor(VARIANTS.find((variant) => variant.tool === 'default')!);

    const response = await postJob(block.sut.baseUrl, apiKey, { ...fields, prompt: 'ü'.repeat(999) + '€' });

    await expectAccepted(response);
  });

  it('answers another user asking for the item exactly as for a missing one: 404', async () => {
    const accepted = await expectAccepted(await postJob(block.sut.baseUrl, apiKey, await fieldsFor(VARIANTS[3])));

    const othersAnswer = await getItem(accepted.history_item_id, otherKey);
    const missingAnswer = await getItem(randomUUID(), otherKey);

    expect(othersAnswer.status).toBe(404);
    expect(missingAnswer.status).toBe(404);
    expect(othersAnswer.headers.get('content-type')).toBe(missingAnswer.headers.get('content-type'));
    const othersBody = othersAnswer.body;
    expect(othersBody).toEqual(missingAnswer.body);
    expect(othersBody.code).toBe('not_found');
    // The owner still sees it.
    expect((await getItem(accepted.history_item_id)).status).toBe(200);
  });

  it('answers an id that is not a UUID with 400', async () => {
    const { status, body } = await getItem('not-a-uuid');

    expect(status).toBe(400);
    expect(body.code).toBe('validation_failed');
    expect(body.errors).toEqual([expect.objectContaining({ field: 'id' })]);
  });
});

describe('a job while it is pending (no worker running)', () => {
  const block = serviceForBlock({ PUBLIC_BASE_URL, ROLE: 'api' });
  let apiKey: string;

  beforeAll(async () => {
    apiKey = await createUserWithKey(block.env.databaseUrl);
  }, 60_000);

  it('has no result paths yet, and its media paths answer 404', async () => {
    const accepted = await expectAccepted(await postJob(block.sut.baseUrl, apiKey, await fieldsFor(VARIANTS[0])));

    const { status, body: item } = await new Client(block.sut.baseUrl, apiKey).get(accepted.history_item_id);

    expect(status).toBe(200);
    expect(item).toEqual({
      history_item_id: accepted.history_item_id,
      tool: 'fashion_swap',
      generation_type: 'fashion_swap_full',
      status: 'pending',
      preview_url: null,
      stock_url: null,
      output_url: null,
      like: null,
      error: null,
      created_at: expect.any(String),
      updated_at: expect.any(String),
      completed_at: null,
      // Queued, with no worker: nothing has been reported, and it is next in its engine's line.
      progress: null,
      expires_at: null,
      media_urls_expire_at: null,
      outputs: null,
      webhook: null,
      started_at: null,
      queue_position: 1,
      metrics: null,
    });
    for (const path of [accepted.preview_image, accepted.stock_image]) {
      const media = await fetch(`${block.sut.baseUrl}/${path}`);
      expect(media.status).toBe(404);
      await expectMatchesContract(media, 'GET', '/media/{id}/{file}');
    }
  });
});
