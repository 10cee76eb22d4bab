import sharp from 'sharp';
import { renderOutputs } from './renderer.js';

const LIMIT = 40_000_000;

function photo(format: 'jpeg' | 'png', withExif = false): Promise<Buffer> {
  const image = sharp({ create: { width: 640, height: 480, channels: 3, background: '#4080c0' } });
  const encoded = format === 'jpeg' ? image.jpeg({ quality: 80 }) : image.png();
  return (withExif ? encoded.withMetadata({ orientation: 6 }) : encoded).toBuffer();
}

/** A JPEG segment: its marker, its length, its text. */
function segment(marker: number, text: string): Buffer {
  const body = Buffer.from(text, 'latin1');
  const head = Buffer.from([0xff, marker, 0, 0]);
  head.writeUInt16BE(body.length + 2, 2);
  return Buffer.concat([head, body]);
}

describe('renderOutputs of a remote engine’s image', () => {
  it.each([
    ['baseline', {}],
    ['progressive', { progressive: true }],
    ['mozjpeg-optimised', { mozjpeg: true }],
  ])(
    'keeps a plain %s JPEG as the stock image byte for byte, and makes a WebP preview of it',
    async (_kind, options) => {
      const model = await sharp(await photo('png'))
        .jpeg({ quality: 80, ...options })
        .toBuffer();

      const sut = await renderOutputs({ kind: 'encoded', data: model }, LIMIT);

      expect(sut.stock.equals(model)).toBe(true);
      expect(await sharp(sut.preview).metadata()).toMatchObject({ format: 'webp', width: 512, height: 384 });
    },
  );

  it('encodes a JPEG carrying metadata again: turned as its orientation says, the metadata gone', async () => {
    const sut = await renderOutputs({ kind: 'encoded', data: await photo('jpeg', true) }, LIMIT);

    const stock = await sharp(sut.stock).metadata();
    expect(stock).toMatchObject({ format: 'jpeg', width: 480, height: 640 });
    expect(stock.exif).toBeUndefined();
  });

  it.each([
    [
      'a comment',
      (jpeg: Buffer) =>
        Buffer.concat([jpeg.subarray(0, 2), segment(0xfe, 'GPS 48.85N 2.35E, Jane Doe, home'), jpeg.subarray(2)]),
    ],
    [
      'bytes after its end (a phone trailer)',
      (jpeg: Buffer) => Buffer.concat([jpeg, Buffer.from('GPS Jane Doe SEFT')]),
    ],
    [
      "an Adobe segment longer than Adobe's",
      (jpeg: Buffer) =>
        Buffer.concat([jpeg.subarray(0, 2), segment(0xee, 'Adobe\0\x64\0\0\0\0\x01 Jane Doe home'), jpeg.subarray(2)]),
    ],
    [
      'an APP1 segment that is not EXIF',
      (jpeg: Buffer) => Buffer.concat([jpeg.subarray(0, 2), segment(0xe1, 'Jane Doe home'), jpeg.subarray(2)]),
    ],
  ])('encodes a JPEG carrying %s again, without it', async (_case, carrying) => {
    const model = carrying(await photo('jpeg'));

    const sut = await renderOutputs({ kind: 'encoded', data: model }, LIMIT);

    expect(sut.stock.equals(model)).toBe(false);
    expect(sut.stock.includes('Jane Doe')).toBe(false);
    expect(await sharp(sut.stock).metadata()).toMatchObject({ format: 'jpeg', width: 640, height: 480 });
  });

  it('encodes a JPEG with a colour profile again, in sRGB without the profile', async () => {
    const model = await sharp(await photo('jpeg'))
      .withIccProfile('p3')
      .jpeg()
      .toBuffer();

    const sut = await renderOutputs({ kind: 'encoded', data: model }, LIMIT);

    expect(sut.stock.equals(model)).toBe(false);
    expect((await sharp(sut.stock).metadata()).icc).toBeUndefined();
  });

  it('encodes a PNG as the JPEG clients download', async () => {
    const sut = await renderOutputs({ kind: 'encoded', data: await photo('png') }, LIMIT);

    expect(await sharp(sut.stock).metadata()).toMatchObject({ format: 'jpeg', width: 640, height: 480 });
  });
});
