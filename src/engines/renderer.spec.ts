import sharp from 'sharp';
import { renderOutputs } from './renderer.js';

const LIMIT = 40_000_000;

function photo(format: 'jpeg' | 'png', withExif = false): Promise<Buffer> {
  const image = sharp({ create: { width: 640, height: 480, channels: 3, background: '#4080c0' } });
  const encoded = format === 'jpeg' ? image.jpeg({ quality: 80 }) : image.png();
  return (withExif ? encoded.withMetadata({ orientation: 6 }) : encoded).toBuffer();
}

describe('renderOutputs of a remote engine’s image', () => {
  it('keeps a plain JPEG as the stock image byte for byte, and makes a WebP preview of it', async () => {
    const model = await photo('jpeg');

    const sut = await renderOutputs({ kind: 'encoded', data: model }, LIMIT);

    expect(sut.stock.equals(model)).toBe(true);
    expect(await sharp(sut.preview).metadata()).toMatchObject({ format: 'webp', width: 512, height: 384 });
  });

  it('encodes a JPEG carrying metadata again: turned as its orientation says, the metadata gone', async () => {
    const sut = await renderOutputs({ kind: 'encoded', data: await photo('jpeg', true) }, LIMIT);

    const stock = await sharp(sut.stock).metadata();
    expect(stock).toMatchObject({ format: 'jpeg', width: 480, height: 640 });
    expect(stock.exif).toBeUndefined();
  });

  it('encodes a PNG as the JPEG clients download', async () => {
    const sut = await renderOutputs({ kind: 'encoded', data: await photo('png') }, LIMIT);

    expect(await sharp(sut.stock).metadata()).toMatchObject({ format: 'jpeg', width: 640, height: 480 });
  });
});
