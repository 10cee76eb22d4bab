import sharp, { type Sharp } from 'sharp';
import { PermanentEngineError } from './engine.js';
import { plainImage } from './plain-image.js';

const LIMIT = 40_000_000;
/** Where and with what a phone took the photo, as its EXIF says. */
const PHONE_EXIF = {
  IFD0: { Make: 'PhonePhone', Model: 'Jane Doe’s phone' },
  IFD3: { GPSLatitudeRef: 'N', GPSLatitude: '48/1 51/1 24/1', GPSLongitudeRef: 'E', GPSLongitude: '2/1 21/1 7/1' },
};

/** A 640x480 landscape image, red on its left half and blue on its right. */
function halves(): Sharp {
  const red = { r: 220, g: 30, b: 30 };
  const blue = { r: 30, g: 30, b: 220 };
  const data = Buffer.alloc(640 * 480 * 3);
  for (let y = 0; y < 480; y++) {
    for (let x = 0; x < 640; x++) {
      const { r, g, b } = x < 320 ? red : blue;
      data.set([r, g, b], (y * 640 + x) * 3);
    }
  }
  return sharp(data, { raw: { width: 640, height: 480, channels: 3 } });
}

async function pixel(image: Buffer, x: number, y: number): Promise<number[]> {
  const { data, info } = await sharp(image).raw().toBuffer({ resolveWithObject: true });
  const at = (y * info.width + x) * info.channels;
  return [...data.subarray(at, at + 3)];
}

describe('plainImage: a photo as a model server gets it', () => {
  it.each([
    ['JPEG', () => halves().jpeg().toBuffer()],
    ['PNG', () => halves().png().toBuffer()],
    ['WebP', () => halves().webp().toBuffer()],
  ])('sends a %s holding nothing but its pixels as it is', async (_format, make) => {
    const photo = await make();

    const sut = await plainImage(photo, 'person', LIMIT);

    expect(sut.equals(photo)).toBe(true);
  });

  it("turns a phone's sideways JPEG upright and drops where and with what it was taken", async () => {
    // Stored as the sensor saw it, landscape; orientation 6: turn 90° clockwise to show it, a portrait.
    const photo = await halves().jpeg().withExif(PHONE_EXIF).withMetadata({ orientation: 6 }).toBuffer();
    expect((await sharp(photo).metadata()).exif?.includes('PhonePhone')).toBe(true);

    const sut = await plainImage(photo, 'person', LIMIT);

    const metadata = await sharp(sut).metadata();
    expect(metadata).toMatchObject({ format: 'jpeg', width: 480, height: 640 });
    expect(metadata.exif).toBeUndefined();
    expect(metadata.orientation).toBeUndefined();
    expect(sut.includes('PhonePhone')).toBe(false);
    // The left half, turned clockwise, is the top.
    const [top, bottom] = [await pixel(sut, 240, 100), await pixel(sut, 240, 540)];
    expect(top[0]).toBeGreaterThan(180);
    expect(top[2]).toBeLessThan(80);
    expect(bottom[2]).toBeGreaterThan(180);
    expect(bottom[0]).toBeLessThan(80);
  });

  it.each([
    ['PNG', 'png', () => halves().png().withExif(PHONE_EXIF).withXmp('<x:xmpmeta>Jane Doe</x:xmpmeta>').toBuffer()],
    ['WebP', 'webp', () => halves().webp().withExif(PHONE_EXIF).toBuffer()],
    ['PNG with a colour profile', 'png', () => halves().png().withIccProfile('p3').toBuffer()],
  ])('encodes a %s carrying metadata again in its format, without it', async (_case, format, make) => {
    const photo = await make();

    const sut = await plainImage(photo, 'clothes', LIMIT);

    const metadata = await sharp(sut).metadata();
    expect(metadata).toMatchObject({ format, width: 640, height: 480 });
    expect([metadata.exif, metadata.xmp, metadata.icc]).toEqual([undefined, undefined, undefined]);
    expect(sut.includes('Jane Doe')).toBe(false);
  });

  it('encodes a CMYK JPEG again in sRGB, though it carries no metadata: a model reading it would get four channels', async () => {
    const photo = await halves().toColourspace('cmyk').jpeg().toBuffer();

    const sut = await plainImage(photo, 'person', LIMIT);

    expect(await sharp(sut).metadata()).toMatchObject({ format: 'jpeg', space: 'srgb', channels: 3 });
    const [left, right] = [await pixel(sut, 100, 240), await pixel(sut, 540, 240)];
    // Red and blue each lose some of their strength through CMYK's gamut, but stay what they were.
    expect(left[0]).toBeGreaterThan(left[2] + 80);
    expect(right[2]).toBeGreaterThan(right[0] + 50);
  });

  it.each([
    ['PNG', 'png', () => halves().png().toBuffer()],
    ['WebP', 'webp', () => halves().webp().toBuffer()],
  ])('encodes a %s with bytes after its end again, without them', async (_format, format, make) => {
    const photo = Buffer.concat([await make(), Buffer.from('GPS 48.85N 2.35E, Jane Doe, home')]);

    const sut = await plainImage(photo, 'clothes', LIMIT);

    expect(sut.includes('Jane Doe')).toBe(false);
    expect(await sharp(sut).metadata()).toMatchObject({ format, width: 640, height: 480 });
  });

  it.each([
    ['a truncated JPEG', async () => (await halves().jpeg().withExif(PHONE_EXIF).toBuffer()).subarray(0, 2000)],
    ['bytes that are no image', () => Promise.resolve(Buffer.from('not an image at all'))],
  ])('fails the job invalid_image, naming the input, for %s', async (_case, make) => {
    const error = await plainImage(await make(), 'person', LIMIT).catch((caught: unknown) => caught);

    expect(error).toBeInstanceOf(PermanentEngineError);
    expect(error).toMatchObject({ code: 'invalid_image', message: expect.stringContaining("'person'") });
  });

  it('fails the job invalid_image for an image over the pixel limit', async () => {
    const photo = await halves().jpeg().withExif(PHONE_EXIF).toBuffer();

    await expect(plainImage(photo, 'person', 640 * 480 - 1)).rejects.toMatchObject({ code: 'invalid_image' });
  });
});
