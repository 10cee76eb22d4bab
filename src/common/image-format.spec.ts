import sharp from 'sharp';
import { imageFormatOf } from './image-format.js';

describe('imageFormatOf', () => {
  const create = { width: 2, height: 2, channels: 3 as const, background: '#808080' };

  it('reads JPEG, PNG and WebP by their magic numbers', async () => {
    expect(imageFormatOf(await sharp({ create }).jpeg().toBuffer())).toBe('jpeg');
    expect(imageFormatOf(await sharp({ create }).png().toBuffer())).toBe('png');
    expect(imageFormatOf(await sharp({ create }).webp().toBuffer())).toBe('webp');
  });

  it('reads the first bytes only: a head of a file is enough', async () => {
    const png = await sharp({ create }).png().toBuffer();

    expect(imageFormatOf(png.subarray(0, 12))).toBe('png');
  });

  it('knows nothing else', async () => {
    expect(imageFormatOf(Buffer.from('RIFF\0\0\0\0WAVE'))).toBeUndefined();
    expect(imageFormatOf(await sharp({ create }).gif().toBuffer())).toBeUndefined();
    expect(imageFormatOf(Buffer.alloc(0))).toBeUndefined();
  });
});
