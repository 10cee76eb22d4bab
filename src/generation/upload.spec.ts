import { createHash } from 'node:crypto';
import sharp from 'sharp';
import { formatOf } from './upload.js';
import { Probe } from './upload-storage.js';

/** Feeds `bytes` to a probe in chunks of the given sizes, repeated, the way a socket may deliver them. */
function probe(bytes: Buffer, chunkSizes: number[], hashed = false): Probe {
  const sut = new Probe(hashed ? createHash('sha256') : undefined);
  for (let offset = 0, i = 0; offset < bytes.length; i++) {
    const size = chunkSizes[i % chunkSizes.length];
    sut.see(bytes.subarray(offset, offset + size));
    offset += size;
  }
  return sut;
}

const image = (format: 'png' | 'jpeg' | 'webp') =>
  sharp({ create: { width: 80, height: 60, channels: 3, background: '#a05030' } })
    .toFormat(format)
    .toBuffer();

describe('upload probe', () => {
  it.each([
    ['one chunk', [1_000_000]],
    ['single bytes', [1]],
    ['uneven chunks', [7, 1, 63, 64, 65, 3]],
  ])('identifies whole JPEG, PNG and WebP files fed in %s', async (_case, chunks) => {
    for (const format of ['png', 'jpeg', 'webp'] as const) {
      const bytes = await image(format);
      const sut = probe(bytes, chunks);

      expect([format, formatOf(sut.head, sut.tail, bytes.length)]).toEqual([format, format]);
    }
  });

  it.each(['png', 'jpeg', 'webp'] as const)('refuses a %s that was cut off', async (format) => {
    const bytes = (await image(format)).subarray(0, -20);
    const sut = probe(bytes, [5, 64, 3]);

    expect(formatOf(sut.head, sut.tail, bytes.length)).toBeUndefined();
  });

  it('refuses text, an SVG and a file too short to tell', () => {
    for (const text of ['just some text, not an image at all', '<svg xmlns="http://www.w3.org/2000/svg"/>', 'GIF']) {
      const bytes = Buffer.from(text);
      const sut = probe(bytes, [4]);

      expect([text, formatOf(sut.head, sut.tail, bytes.length)]).toEqual([text, undefined]);
    }
  });

  it.each([
    ['a file longer than the head', 200_000],
    ['a file shorter than the head', 1000],
  ])('keeps the first 64 KiB of %s, across chunks', (_case, length) => {
    const bytes = Buffer.from(Array.from({ length }, (_, i) => (i * 7) % 251));

    const sut = probe(bytes, [7, 1, 65_536, 3000]);

    expect(sut.head.equals(bytes.subarray(0, 64 * 1024))).toBe(true);
  });

  it('gives a released head to the next probe, which sees only its own bytes', () => {
    const first = probe(Buffer.alloc(100_000, 1), [4096]);
    first.release();

    const second = probe(Buffer.alloc(10, 2), [3]);

    expect(first.head.length).toBe(0);
    expect(second.head).toEqual(Buffer.alloc(10, 2));
  });

  it('digests the whole file, when asked to', async () => {
    const bytes = await image('jpeg');

    expect(probe(bytes, [3, 100], true).hash?.digest('hex')).toBe(createHash('sha256').update(bytes).digest('hex'));
    expect(probe(bytes, [3, 100], false).hash).toBeUndefined();
  });
});
