import { randomUUID } from 'node:crypto';
import { unlinkSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buffer } from 'node:stream/consumers';
import { inputKey, itemIdOfInputKey, outputKey } from './media.js';
import { LocalObjectStore } from './object-store.js';

describe('LocalObjectStore', () => {
  let dir: string;
  let root: string;
  let sut: LocalObjectStore;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'object-store-'));
    root = join(dir, 'store');
    sut = new LocalObjectStore(root);
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** An upload's temporary file, outside the store. */
  async function upload(content: string): Promise<string> {
    const path = join(dir, randomUUID());
    await writeFile(path, content);
    return path;
  }

  it('moves uploads in as flat files, making the store folder on the first one', async () => {
    const id = randomUUID();
    const clothes = await upload('clothes bytes');
    const person = await upload('person bytes');

    await sut.putFile(inputKey(id, 'clothes'), clothes);
    await sut.putFile(inputKey(id, 'person'), person);

    expect((await readdir(root)).sort()).toEqual([inputKey(id, 'clothes'), inputKey(id, 'person')].sort());
    expect((await sut.get(inputKey(id, 'person'))).toString()).toBe('person bytes');
    expect((await readdir(dir)).sort()).toEqual(['store']);
  });

  it('deletes the keys it is given, a missing one included, and nothing else', async () => {
    const id = randomUUID();
    const other = randomUUID();
    for (const key of [inputKey(id, 'clothes'), inputKey(id, 'person'), inputKey(other, 'clothes')]) {
      await sut.putFile(key, await upload(key));
    }

    await sut.delete([inputKey(id, 'clothes'), inputKey(id, 'person'), inputKey(id, 'never-stored')]);

    expect(await readdir(root)).toEqual([inputKey(other, 'clothes')]);
    expect((await readFile(join(root, inputKey(other, 'clothes')))).toString()).toBe(inputKey(other, 'clothes'));
  });

  it("deletes a folder of outputs and leaves its neighbours'", async () => {
    const id = randomUUID();
    const neighbour = randomUUID();
    await sut.put(outputKey(id, 'stock'), Buffer.from('stock'));
    await sut.put(outputKey(id, 'preview'), Buffer.from('preview'));
    await sut.put(outputKey(neighbour, 'stock'), Buffer.from('kept'));

    await sut.deleteFolder(id);

    expect(await readdir(root)).toEqual([neighbour]);
    expect((await sut.get(outputKey(neighbour, 'stock'))).toString()).toBe('kept');
  });

  it('reads an object opened before its removal whole, and opens none once it is removed', async () => {
    const key = outputKey(randomUUID(), 'stock');
    await sut.put(key, Buffer.from('the whole image'));

    const opened = await sut.open(key);
    // At once, before the stream reads anything: the delete of an item racing its download.
    unlinkSync(join(root, key));

    expect(opened?.size).toBe('the whole image'.length);
    expect((await buffer(opened!.stream)).toString()).toBe('the whole image');
    expect(await sut.open(key)).toBeUndefined();
  });

  it('lists every object, in folders too, with when it was written; not a write in progress', async () => {
    const id = randomUUID();
    await sut.putFile(inputKey(id, 'person'), await upload('person bytes'));
    await sut.put(outputKey(id, 'preview'), Buffer.from('webp bytes'));
    const lastWeek = new Date('2026-01-05T10:00:00Z');
    await utimes(join(root, inputKey(id, 'person')), lastWeek, lastWeek);
    await writeFile(join(root, '.a-put-in-progress.tmp'), 'half an image');

    const listed = [];
    for await (const object of sut.list()) listed.push(object);

    expect(listed.map(({ key }) => key).sort()).toEqual([inputKey(id, 'person'), outputKey(id, 'preview')].sort());
    expect(listed.find(({ key }) => key === inputKey(id, 'person'))?.writtenAt).toEqual(lastWeek);
  });

  it('lists nothing before its folder is made', async () => {
    const listed = [];
    for await (const object of sut.list()) listed.push(object);

    expect(listed).toEqual([]);
    await mkdir(root);
    for await (const object of sut.list()) listed.push(object);
    expect(listed).toEqual([]);
  });

  it("reads an input's item from its key, and nothing from any other key", () => {
    const id = randomUUID();

    expect(itemIdOfInputKey(inputKey(id, 'clothes'))).toBe(id);
    expect(itemIdOfInputKey(outputKey(id, 'preview'))).toBeUndefined();
    expect(itemIdOfInputKey(`${id}-`)).toBeUndefined();
    expect(itemIdOfInputKey('an-operators-note')).toBeUndefined();
  });

  it('refuses keys that would leave the store', async () => {
    await expect(sut.delete(['../outside'])).rejects.toThrow('invalid object key');
    await expect(sut.put('a/../../outside', Buffer.from('x'))).rejects.toThrow('invalid object key');
    await expect(sut.deleteFolder('')).rejects.toThrow('invalid object key');
  });
});
