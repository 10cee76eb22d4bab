import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { STORED_MEDIA_CACHE_CONTROL } from '../../src/media/media.js';
import { S3ObjectStore } from '../../src/media/s3-object-store.js';
import { type S3Server, startS3Server } from '../support/s3rver.js';

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** The S3 object store against a real S3-compatible server (s3rver). */
describe('S3ObjectStore', () => {
  let s3: S3Server;
  let scratch: string;

  beforeAll(async () => {
    s3 = await startS3Server();
    scratch = await mkdtemp(join(tmpdir(), 'igs-s3-store-'));
  }, 30_000);

  afterAll(async () => {
    await s3?.stop();
    await rm(scratch, { recursive: true, force: true });
  });

  function storeAt(prefix: string, options: { pageSize?: number; cacheControl?: string } = {}): S3ObjectStore {
    return new S3ObjectStore(s3.client, { bucket: s3.bucket, prefix, ...options });
  }

  it('puts an object under its prefix and gets the same bytes back', async () => {
    const sut = storeAt('media/');
    const id = randomUUID();
    const data = Buffer.from('the stock image');

    await sut.put(`${id}/stock.jpg`, data);

    expect(await sut.get(`${id}/stock.jpg`)).toEqual(data);
    expect(await s3.keys(`media/${id}/`)).toEqual([`media/${id}/stock.jpg`]);
  });

  it("stores an output's Content-Type and the store's Cache-Control, so the bucket can serve it as is", async () => {
    const sut = storeAt('media/', { cacheControl: STORED_MEDIA_CACHE_CONTROL });
    const id = randomUUID();

    await sut.put(`${id}/preview.webp`, Buffer.from('webp bytes'));

    const object = await s3.client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: `media/${id}/preview.webp` }));
    await object.Body!.transformToByteArray();
    expect(object.ContentType).toBe('image/webp');
    expect(object.CacheControl).toBe(STORED_MEDIA_CACHE_CONTROL);
  });

  it('replaces an object whole when the same key is put again', async () => {
    const sut = storeAt('media/');
    const key = `${randomUUID()}/stock.jpg`;

    await sut.put(key, Buffer.from('first run, a longer result'));
    await sut.put(key, Buffer.from('second run'));

    expect((await sut.get(key)).toString()).toBe('second run');
  });

  it('moves a local file into the store: streamed up, then removed from disk', async () => {
    const sut = storeAt('inputs/');
    const source = join(scratch, randomUUID());
    const data = Buffer.alloc(3 * 1024 * 1024, 7);
    await writeFile(source, data);
    const key = `${randomUUID()}/clothes`;

    await sut.putFile(key, source);

    expect(existsSync(source)).toBe(false);
    expect((await sut.get(key)).equals(data)).toBe(true);
  });

  it('opens an object as a stream with its size', async () => {
    const sut = storeAt('media/');
    const key = `${randomUUID()}/stock.jpg`;
    const data = Buffer.from('streamed bytes');
    await sut.put(key, data);

    const opened = await sut.open(key);

    expect(opened?.size).toBe(data.length);
    expect(await readAll(opened!.stream)).toEqual(data);
  });

  it('opens nothing, and gets an error, for a key that does not exist', async () => {
    const sut = storeAt('media/');
    const key = `${randomUUID()}/stock.jpg`;

    expect(await sut.open(key)).toBeUndefined();
    await expect(sut.get(key)).rejects.toThrow();
  });

  it('refuses a key that could climb out of its prefix', async () => {
    const sut = storeAt('media/');

    await expect(sut.put('../inputs/x', Buffer.from('x'))).rejects.toThrow('invalid object key');
    await expect(sut.open('a/../../inputs/x')).rejects.toThrow('invalid object key');
    await expect(sut.deleteFolder('')).rejects.toThrow('invalid object key');
  });

  it("deletes every object of a folder over several pages, and nothing of its neighbours'", async () => {
    const sut = storeAt('media/', { pageSize: 3 });
    const folder = randomUUID();
    const neighbour = `${folder}x`;
    const files = Array.from({ length: 10 }, (_, index) => `${folder}/file-${index}`);
    for (const key of [...files, `${neighbour}/stock.jpg`]) await sut.put(key, Buffer.from(key));
    const otherStore = storeAt('inputs/');
    await otherStore.put(`${folder}/person`, Buffer.from('input'));

    await sut.deleteFolder(folder);

    expect(await s3.keys(`media/${folder}/`)).toEqual([]);
    expect(await s3.keys(`media/${neighbour}/`)).toEqual([`media/${neighbour}/stock.jpg`]);
    expect(await s3.keys(`inputs/${folder}/`)).toEqual([`inputs/${folder}/person`]);
  });

  it('deletes the objects it is given over several calls, a missing one included, and nothing else', async () => {
    const sut = storeAt('inputs/', { pageSize: 2 });
    const id = randomUUID();
    const keys = ['clothes', 'person', 'room'].map((name) => `${id}-${name}`);
    for (const key of [...keys, `${id}-kept`]) await sut.put(key, Buffer.from(key));

    await sut.delete([...keys, `${id}-never-stored`]);

    expect(await s3.keys(`inputs/${id}-`)).toEqual([`inputs/${id}-kept`]);
    await expect(sut.delete(['../media/x'])).rejects.toThrow('invalid object key');
  });

  it('deletes a folder of more than the 1000 keys S3 lists and deletes per call', async () => {
    const sut = storeAt('media/');
    const folder = randomUUID();
    const keys = Array.from({ length: 1001 }, (_, index) => `media/${folder}/${String(index).padStart(4, '0')}`);
    // Straight through the client, ten at a time: this is set-up, not what is under test.
    for (let start = 0; start < keys.length; start += 10) {
      await Promise.all(
        keys
          .slice(start, start + 10)
          .map((Key) => s3.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key, Body: Buffer.from('x') }))),
      );
    }
    expect(await s3.keys(`media/${folder}/`)).toHaveLength(1001);

    await sut.deleteFolder(folder);

    expect(await s3.keys(`media/${folder}/`)).toEqual([]);
  }, 60_000);

  it('lists every object under its prefix over several pages, with when it was written, and no neighbour', async () => {
    const prefix = `${randomUUID()}/`;
    const sut = storeAt(prefix, { pageSize: 2 });
    const keys = ['a-clothes', 'b-person', 'c/preview.webp', 'd-room', 'e-fabric'];
    // S3 keeps the time of a write to the second.
    const before = Math.floor(Date.now() / 1000) * 1000;
    for (const key of keys) await sut.put(key, Buffer.from(key));
    await storeAt(`${prefix.slice(0, -1)}x/`).put('a-neighbour', Buffer.from('not listed'));

    const listed = [];
    for await (const object of sut.list()) listed.push(object);

    expect(listed.map(({ key }) => key).sort()).toEqual(keys);
    for (const { writtenAt } of listed) {
      expect(writtenAt.getTime()).toBeGreaterThanOrEqual(before);
      expect(writtenAt.getTime()).toBeLessThanOrEqual(Date.now());
    }
  });

  it('deletes a folder that does not exist without complaint', async () => {
    await expect(storeAt('media/').deleteFolder(randomUUID())).resolves.toBeUndefined();
  });
});
