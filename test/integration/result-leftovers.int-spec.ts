import { randomUUID } from 'node:crypto';
import type { INestApplicationContext } from '@nestjs/common';
import { Database } from '../../src/database/database.js';
import { JobLifecycle } from '../../src/jobs/job-lifecycle.js';
import { INPUT_STORE, inputKey, MEDIA_STORE, outputKey } from '../../src/media/media.js';
import type { ObjectStore } from '../../src/media/object-store.js';
import { Metrics } from '../../src/metrics/metrics.js';
import { ResultLeftovers } from '../../src/worker/result-leftovers.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { bootLifecycle } from '../support/lifecycle.js';
import { type RefusingProxy, type S3Server, startRefusingProxy, startS3Server } from '../support/s3rver.js';

const HOUR_MS = 3600_000;

describe.each(['local', 's3'] as const)('the media store with STORAGE=%s', (storage) => {
  let env: TestEnvironment;
  let s3: S3Server | undefined;
  let proxy: RefusingProxy | undefined;
  let app: INestApplicationContext;
  let lifecycle: JobLifecycle;
  let sut: ResultLeftovers;
  let db: Database;
  let media: ObjectStore;
  let inputs: ObjectStore;
  let userId: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    let settings = env.serviceEnv;
    if (storage === 's3') {
      s3 = await startS3Server();
      proxy = await startRefusingProxy(s3);
      settings = { ...settings, ...s3.serviceEnv, S3_ENDPOINT: proxy.endpoint };
    }
    app = await bootLifecycle(settings);
    lifecycle = app.get(JobLifecycle);
    sut = app.get(ResultLeftovers);
    db = app.get(Database);
    media = app.get(MEDIA_STORE);
    inputs = app.get(INPUT_STORE);
    userId = randomUUID();
    await db.query({ text: 'INSERT INTO users (id, name) VALUES ($1, $2)', values: [userId, 'owner'] });
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await proxy?.close();
    await s3?.stop();
    await env?.dispose();
  }, 60_000);

  async function pendingItem(): Promise<string> {
    const id = randomUUID();
    const key = inputKey(id, 'image');
    await inputs.put(key, Buffer.from('a photo'));
    const input = { key, format: 'jpeg' as const, width: 64, height: 64, bytes: 7 };
    await lifecycle.accept(
      {
        id,
        userId,
        tool: 'default',
        generationType: 'default',
        inputs: { image: input },
        texts: {},
        webhookUrl: null,
        seed: null,
        numOutputs: 1,
      },
      1000,
    );
    return id;
  }

  const writeOutputs = (id: string) => async () => {
    await media.put(outputKey(id, 'stock'), Buffer.from('stock'));
    await media.put(outputKey(id, 'preview'), Buffer.from('preview'));
  };

  async function completeItem(): Promise<string> {
    const id = await pendingItem();
    if (!(await lifecycle.complete(id, writeOutputs(id)))) throw new Error('the item did not complete');
    return id;
  }

  async function foldersInStore(): Promise<string[]> {
    const names: string[] = [];
    for await (const { key } of media.folders()) names.push(key);
    return names.sort();
  }

  it('removes, once older than an hour, the result folders of no item or of an item that ended without a result', async () => {
    const complete = await completeItem();
    const pending = await pendingItem();
    await writeOutputs(pending)();
    // What a removal whose files could not go, or a crash, leaves: folders of a row that is gone or ended `error`.
    const gone = randomUUID();
    await writeOutputs(gone)();
    const failed = await pendingItem();
    await lifecycle.fail(failed, 'engine_failed', 'The engine could not process the job.');
    await writeOutputs(failed)();
    // Not the service's: not an item's folder.
    await media.put('not-an-item/notes.txt', Buffer.from('kept'));
    const everything = [complete, pending, gone, failed, 'not-an-item'].sort();
    expect(await foldersInStore()).toEqual(everything);

    expect(await sut.sweep(Date.now() + HOUR_MS / 2)).toEqual({ removed: 0, failed: 0 });
    expect(await foldersInStore()).toEqual(everything);

    expect(await sut.sweep(Date.now() + 2 * HOUR_MS)).toEqual({ removed: 2, failed: 0 });
    expect(await foldersInStore()).toEqual([complete, pending, 'not-an-item'].sort());
    expect((await media.get(outputKey(complete, 'stock'))).toString()).toBe('stock');

    for (const id of [complete, pending, failed]) await lifecycle.delete(userId, id);
    await media.delete(['not-an-item/notes.txt']);
  });

  if (storage === 's3') {
    it('deletes an item whose files the bucket refuses to remove, and the sweep takes them once it can', async () => {
      const id = await completeItem();
      proxy!.refused.add(id);

      expect(await lifecycle.delete(userId, id)).toBe(true);

      const [row] = await db.query({ text: 'SELECT id FROM history_items WHERE id = $1', values: [id] });
      expect(row).toBeUndefined();
      expect(await s3!.keys(`media/${id}/`)).toEqual([`media/${id}/preview.webp`, `media/${id}/stock.jpg`]);
      expect(await sut.sweep(Date.now() + 2 * HOUR_MS)).toEqual({ removed: 0, failed: 1 });

      proxy!.refused.delete(id);
      expect(await sut.sweep(Date.now() + 2 * HOUR_MS)).toEqual({ removed: 1, failed: 0 });
      expect(await s3!.keys(`media/${id}/`)).toEqual([]);
    });

    it('expires every due item when one of them cannot be removed, counting that one, and is not held by it after', async () => {
      const failures = async () =>
        (await app.get(Metrics).registry.getSingleMetric('igs_retention_failures_total')!.get()).values[0].value;
      const before = await failures();
      const [first, stuck, last] = [await completeItem(), await completeItem(), await completeItem()];
      proxy!.refused.add(stuck);

      expect(await lifecycle.expire(0, 1000)).toBe(3);

      expect(await failures()).toBe(before + 1);
      const rows = await db.query({
        text: 'SELECT id FROM history_items WHERE id = ANY($1::uuid[])',
        values: [[first, stuck, last]],
      });
      expect(rows).toEqual([]);
      expect(await s3!.keys('media/')).toEqual([`media/${stuck}/preview.webp`, `media/${stuck}/stock.jpg`]);
      // The next round finds nothing due: the stuck item's files wait for the sweep, not in the way of others.
      const next = await completeItem();
      expect(await lifecycle.expire(0, 1000)).toBe(1);
      expect(await s3!.keys(`media/${next}/`)).toEqual([]);

      proxy!.refused.delete(stuck);
      expect(await sut.sweep(Date.now() + 2 * HOUR_MS)).toEqual({ removed: 1, failed: 0 });
      expect(await s3!.keys('media/')).toEqual([]);
    });
  }
});
