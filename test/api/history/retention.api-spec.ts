import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { inputKey } from '../../../src/media/media.js';
import { createJob, type HistoryItemBody, type HistoryPageBody, waitForFinal } from '../../support/client.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { openStream, type OpenStream } from '../../support/event-stream.js';
import { type FakeCogAnswer, type FakeCogRequest, sha256 } from '../../support/fake-cog.js';
import {
  cogEngine,
  createUser,
  expectCompleteWithOutputs,
  expectNoMedia,
  getItem,
  listDir,
  mediaFolder,
  Processes,
  query,
  storedInputs,
  submit,
  uniqueImage,
  waitUntil,
  WorkerWorld,
} from '../../support/harness.js';
import { inputsFor } from '../../support/jobs.js';
import { startS3Server, type S3Server } from '../../support/s3rver.js';

const RETENTION_MS = 3000;
/** Items are kept RETENTION_MS after they end, and the workers look for expired ones five times a second. */
const RETENTION = { HISTORY_RETENTION: `${RETENTION_MS / 1000}s`, RETENTION_SWEEP_INTERVAL_MS: '200' };
/** Old items written straight into the table: more than one batch of the sweep. */
const SEEDED = 450;
/** How long the held job runs on the fake model: long enough for finished items to expire and go meanwhile. */
const HELD_MS = 15_000;

/** When the contract says a final item goes: `completed_at` plus the retention. */
function expectedExpiry(item: HistoryItemBody): string {
  return new Date(Date.parse(item.completed_at!) + RETENTION_MS).toISOString();
}

/** Final items that ended an hour ago, of `userId`, each with an input still stored (as a crashed run leaves it). */
async function seedExpired(env: TestEnvironment, userId: string, count: number): Promise<string[]> {
  const ids = Array.from({ length: count }, () => randomUUID());
  const inputs = ids.map((id) =>
    JSON.stringify({ image: { key: inputKey(id, 'image'), format: 'png', width: 320, height: 400, bytes: 4 } }),
  );
  await query(
    env,
    `INSERT INTO history_items (id, user_id, tool, generation_type, status, inputs, error_code, error_message,
                                created_at, updated_at, completed_at)
     SELECT id, $1, 'default', 'enhance', CASE WHEN n % 5 = 0 THEN 'error' ELSE 'complete' END, input::jsonb,
            CASE WHEN n % 5 = 0 THEN 'engine_failed' END, CASE WHEN n % 5 = 0 THEN 'The engine failed.' END,
            now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour'
       FROM unnest($2::uuid[], $3::text[]) WITH ORDINALITY AS t(id, input, n)`,
    [userId, ids, inputs],
  );
  return ids;
}

async function itemAnswer(
  baseUrl: string,
  key: string,
  id: string,
): Promise<{ status: number; item?: HistoryItemBody }> {
  const answer = await getItem(baseUrl, key, id);
  return answer.status === 200 ? { status: 200, item: answer.body } : { status: answer.status };
}

async function gone(baseUrl: string, key: string, id: string): Promise<boolean> {
  return (await itemAnswer(baseUrl, key, id)).status === 404;
}

async function remainingOf(env: TestEnvironment, ids: string[]): Promise<number> {
  const [{ count }] = await query<{ count: number }>(
    env,
    'SELECT count(*)::int AS count FROM history_items WHERE id = ANY($1::uuid[])',
    [ids],
  );
  return count;
}

describe('HISTORY_RETENTION with local storage', () => {
  let world: WorkerWorld;
  let env: TestEnvironment;
  let processes: Processes;
  let baseUrl: string;
  let key: string;
  let userId: string;
  let events: OpenStream | undefined;
  /** What the fake model does for each job, by the sha256 of its `clothes` image; unlisted jobs succeed at once. */
  const plans = new Map<string, FakeCogAnswer>();

  beforeAll(async () => {
    world = await WorkerWorld.create(
      (request: FakeCogRequest) => plans.get(Object.values(request.images)[0]) ?? { kind: 'succeed' },
    );
    ({ env, processes } = world);
    baseUrl = (await processes.start('api', { ...cogEngine(world.fake), ...RETENTION })).baseUrl;
    ({ key, userId } = await createUser(env));
  }, 60_000);

  afterAll(async () => {
    events?.close();
    await world?.dispose();
  }, 60_000);

  async function submitPlanned(answer: FakeCogAnswer): Promise<{ id: string; clothes: Buffer }> {
    const clothes = await uniqueImage();
    plans.set(sha256(clothes), answer);
    return { id: await submit(baseUrl, key, clothes), clothes };
  }

  it('removes old final items with their files, in batches beside a running job, and never a pending one', async () => {
    // Only the API runs so far: nothing is swept while the old items and their files are put in place.
    const seeded = await seedExpired(env, userId, SEEDED);
    await mkdir(env.serviceEnv.INPUT_ROOT, { recursive: true });
    for (const id of seeded) {
      await writeFile(join(env.serviceEnv.INPUT_ROOT, inputKey(id, 'image')), 'left');
      await mkdir(mediaFolder(env, id), { recursive: true });
      await writeFile(join(mediaFolder(env, id), 'stock.jpg'), 'old');
    }
    events = await openStream(`${baseUrl}/user/events`, key);
    await processes.start('worker', { ...cogEngine(world.fake), ...RETENTION });

    const done = await submitPlanned({ kind: 'succeed' });
    const failed = await submitPlanned({ kind: 'fail', error: 'the model raised' });
    const complete = await waitForFinal(baseUrl, key, done.id);
    const error = await waitForFinal(baseUrl, key, failed.id);
    expect(complete.status).toBe('complete');
    expect(error.status).toBe('error');
    expect(complete.expires_at).toBe(expectedExpiry(complete));
    expect(error.expires_at).toBe(expectedExpiry(error));

    const held = await submitPlanned({ kind: 'succeed', delayMs: HELD_MS });
    await world.fake.waitFor((fake) => fake.inFlight().length === 1, 'the held job to reach the model');
    const pending = await itemAnswer(baseUrl, key, held.id);
    expect(pending.item).toMatchObject({ status: 'pending', completed_at: null, expires_at: null });

    await waitUntil(
      async () => (await gone(baseUrl, key, done.id)) && (await gone(baseUrl, key, failed.id)),
      'the finished items to expire',
    );
    await waitUntil(async () => (await remainingOf(env, seeded)) === 0, 'the seeded items to be removed');
    // The rows go first, their files right after.
    await waitUntil(async () => (await listDir(env.serviceEnv.MEDIA_ROOT)).length === 0, 'their result files to go');

    // The held job is still running on the model, its item pending and listed alone; nothing of the others is left.
    expect(world.fake.inFlight().map((request) => request.images.clothes)).toEqual([sha256(held.clothes)]);
    const still = await itemAnswer(baseUrl, key, held.id);
    expect(still.item).toMatchObject({ status: 'pending', expires_at: null });
    const list = await fetch(`${baseUrl}/user/generation-history`, { headers: { Authorization: `Bearer ${key}` } });
    const page = (await list.json()) as HistoryPageBody;
    expect(page.items.map((item) => item.history_item_id)).toEqual([held.id]);
    expect(page.total).toBe(1);
    await expectNoMedia(env, baseUrl, done.id);
    await expectNoMedia(env, baseUrl, failed.id);
    expect(await listDir(env.serviceEnv.MEDIA_ROOT)).toEqual([]);
    expect(await listDir(env.serviceEnv.INPUT_ROOT)).toEqual(await storedInputs(env, held.id));
    // Every open history page heard of each removal.
    const deleted = events.events
      .filter((event) => event.event === 'deleted')
      .map((event) => (event.data as { history_item_id: string }).history_item_id);
    expect(new Set(deleted)).toEqual(new Set([...seeded, done.id, failed.id]));

    const finished = await waitForFinal(baseUrl, key, held.id, HELD_MS + 15_000);
    await expectCompleteWithOutputs(baseUrl, finished);
    expect(finished.expires_at).toBe(expectedExpiry(finished));
    await waitUntil(() => gone(baseUrl, key, held.id), 'the held item to expire in its turn');
    await expectNoMedia(env, baseUrl, held.id);
  }, 90_000);
});

describe('HISTORY_RETENTION with STORAGE=s3', () => {
  let env: TestEnvironment;
  let s3: S3Server;
  let processes: Processes;
  let serviceEnv: Record<string, string>;
  let baseUrl: string;
  let key: string;
  let userId: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    s3 = await startS3Server();
    processes = new Processes(env);
    serviceEnv = { ...s3.serviceEnv, ...RETENTION };
    baseUrl = (await processes.start('api', serviceEnv)).baseUrl;
    ({ key, userId } = await createUser(env));
  }, 60_000);

  afterAll(async () => {
    await processes?.stopAll();
    await s3?.stop();
    await env?.dispose();
  }, 60_000);

  it('removes an expired item with its objects in the bucket', async () => {
    const seeded = await seedExpired(env, userId, 3);
    for (const id of seeded) {
      for (const objectKey of [
        `media/${id}/stock.jpg`,
        `media/${id}/preview.webp`,
        `inputs/${inputKey(id, 'image')}`,
      ]) {
        await s3.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: objectKey, Body: 'old' }));
      }
    }
    await processes.start('worker', serviceEnv);

    const id = await createJob(baseUrl, key, await inputsFor('default'));
    const item = await waitForFinal(baseUrl, key, id, 45_000);
    expect(item).toMatchObject({ status: 'complete', expires_at: expectedExpiry(item) });
    await waitUntil(() => gone(baseUrl, key, id), 'the item to expire', 30_000);

    expect(await remainingOf(env, seeded)).toBe(0);
    // The rows go first, their objects right after.
    await waitUntil(async () => (await s3.keys()).length === 0, "the expired items' objects to be removed");
    expect((await fetch(`${baseUrl}/${item.stock_url}`)).status).toBe(404);
  }, 90_000);
});
