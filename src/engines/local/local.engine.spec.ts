import { readFile } from 'node:fs/promises';
import sharp from 'sharp';

import { type EngineRequest, PermanentEngineError } from '../engine.js';
import { type Raw, type Region, decode, meanColour, meanDiff, raw } from '../../../test/support/pixels.js';
import { LocalEngine } from './local.engine.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { abs, max, min, sqrt } = Math;

// --- synthetic inputs (lossless PNG, so untouched pixels compare exactly) ------------------------------------

const png = (width: number, height: number, body: string): Promise<Buffer> =>
  sharp(Buffer.from(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}">${body}</svg>`))
    .png()
    .toBuffer();

/**
 * The drawn 600x800 figure of the examples (scripts/make-examples.mjs): standing, arms down, on a plain light
 * backdrop, in dark trousers. The person models find its keypoints as on a photo.
 */
const person = (): Promise<Buffer> => readFile('docs/examples/fashion_swap/input-person.jpg');

/** A red t-shirt on white. */
const tshirt = (): Promise<Buffer> =>
  png(
    240,
    240,
    `<rect width="240" height="240" fill="#ffffff"/>
     <path d="M95 30 L60 40 L20 85 L40 105 L70 85 L72 215 L168 215 L170 85 L200 105 L220 85 L180 40 L145 30 Q120 55 95 30 Z" fill="#cc2a1e"/>`,
  );

/** Yellow trousers on white. */
const trousers = (): Promise<Buffer> =>
  png(
    200,
    320,
    `<rect width="200" height="320" fill="#ffffff"/>
     <path d="M55 20 L145 20 L155 300 L108 300 L100 120 L92 300 L45 300 Z" fill="#e0b020"/>`,
  );

/** A room: light ceiling/wall above y=120 of 200, brown floor below. */
const room = (): Promise<Buffer> =>
  png(
    320,
    200,
    `<rect width="320" height="120" fill="#efe6d6"/><rect y="20" width="320" height="100" fill="#e2d6c0"/>
     <rect y="120" width="320" height="80" fill="#9c7049"/>`,
  );

/** A dark green chair on white. */
const chair = (): Promise<Buffer> =>
  png(
    160,
    160,
    `<rect width="160" height="160" fill="#ffffff"/>
     <rect x="40" y="20" width="80" height="80" fill="#1f6b4f"/><rect x="30" y="90" width="100" height="30" fill="#1f6b4f"/>
     <rect x="35" y="120" width="8" height="30" fill="#3b2616"/><rect x="117" y="120" width="8" height="30" fill="#3b2616"/>`,
  );

/** A blue/white checked fabric. */
const fabric = (): Promise<Buffer> =>
  png(
    64,
    64,
    `<rect width="64" height="64" fill="#ffffff"/><rect width="32" height="32" fill="#1d3fbf"/><rect x="32" y="32" width="32" height="32" fill="#1d3fbf"/>`,
  );

/** A cushion on a plain grey backdrop: left half darker (in shade) than the right half. */
const cushion = (): Promise<Buffer> =>
  png(
    240,
    160,
    `<rect width="240" height="160" fill="#e8e8e8"/>
     <rect x="40" y="30" width="80" height="100" fill="#8a7a66"/><rect x="120" y="30" width="80" height="100" fill="#c2ad90"/>`,
  );

/** A low-contrast "photo". */
const dullPhoto = (): Promise<Buffer> =>
  png(
    200,
    120,
    `<rect width="200" height="60" fill="#8c96a0"/><rect y="60" width="200" height="60" fill="#7d8a70"/>
     <circle cx="150" cy="30" r="12" fill="#a9a9a0"/><rect x="20" y="40" width="30" height="40" fill="#6e7466"/>`,
  );

// --- helpers ---------------------------------------------------------------------------------------------

const lum = ([r, g, b]: [number, number, number]): number => 0.299 * r + 0.587 * g + 0.114 * b;

function lumaStdDev(a: Raw): number {
  const n = a.width * a.height;
  let sum = 0;
  let sq = 0;
  for (let i = 0; i < n; i++) {
    const v = lum([a.data[i * a.channels], a.data[i * a.channels + 1], a.data[i * a.channels + 2]]);
    sum += v;
    sq += v * v;
  }
  const mean = sum / n;
  return sqrt(sq / n - mean * mean);
}

const request = (
  tool: string,
  generationType: string,
  images: Record<string, Buffer>,
  texts: Record<string, string> = {},
): EngineRequest => ({
  jobId: 'job-1',
  tool,
  generationType,
  images,
  texts,
});

// Regions of the 600x800 person.
const CORNERS: Region[] = [
  { left: 0, top: 0, width: 80, height: 80 },
  { left: 520, top: 0, width: 80, height: 80 },
  { left: 0, top: 720, width: 80, height: 80 },
  { left: 520, top: 720, width: 80, height: 80 },
];
const FACE: Region = { left: 270, top: 60, width: 60, height: 60 };
const CHEST: Region = { left: 260, top: 200, width: 80, height: 90 };
const SHINS: Region = { left: 250, top: 580, width: 100, height: 100 };

describe('LocalEngine', () => {
  let sut: LocalEngine;

  beforeEach(() => {
    sut = new LocalEngine();
  });

  describe('fashion_swap', () => {
    it('puts the garment on the torso, keeps the person image size and leaves the backdrop corners untouched', async () => {
      const personPng = await person();
      const before = await decode(personPng);
      const after = raw(
        await sut.generate(
          request('fashion_swap', 'fashion_swap_full', { clothes: await tshirt(), person: personPng }),
        ),
      );

      expect([after.width, after.height, after.channels]).toEqual([600, 800, 3]);
      expect(meanDiff(before, after, CHEST)).toBeGreaterThan(40);
      expect(meanDiff(before, after, FACE)).toBe(0);
      const [r, g, b] = meanColour(after, CHEST);
      expect(r).toBeGreaterThan(150);
      expect(g).toBeLessThan(90);
      expect(b).toBeLessThan(90);
      for (const corner of CORNERS) expect(meanDiff(before, after, corner)).toBe(0);
    });

    it('is deterministic: the same inputs give identical bytes', async () => {
      const images = { clothes: await tshirt(), person: await person() };
      const first = raw(await sut.generate(request('fashion_swap', 'fashion_swap_full', images)));
      const second = raw(await new LocalEngine().generate(request('fashion_swap', 'fashion_swap_full', images)));

      expect(first.data.equals(second.data)).toBe(true);
    });

    it('treats a garment with two legs as trousers in the full swap', async () => {
      const personPng = await person();
      const before = await decode(personPng);
      const after = raw(
        await sut.generate(
          request('fashion_swap', 'fashion_swap_full', { clothes: await trousers(), person: personPng }),
        ),
      );

      expect(meanDiff(before, after, SHINS)).toBeGreaterThan(40);
      expect(meanDiff(before, after, CHEST)).toBeLessThan(5);
    });
  });

  describe('fashion_swap inputs', () => {
    it('uses the transparency of a cut-out PNG garment', async () => {
      const personPng = await person();
      const before = await decode(personPng);
      const cutout = await png(240, 240, '<path d="M60 40 L180 40 L175 215 L65 215 Z" fill="#cc2a1e"/>');
      const after = raw(
        await sut.generate(request('fashion_swap_half', 'upper', { clothes: cutout, person: personPng })),
      );

      expect(meanColour(after, CHEST)[0]).toBeGreaterThan(150);
      for (const corner of CORNERS) expect(meanDiff(before, after, corner)).toBe(0);
    });

    it('refuses a garment photo with a busy background with unsupported_input', async () => {
      let stripes = '';
      for (let x = 0; x < 240; x += 12)
        stripes += `<rect x="${x}" width="6" height="240" fill="${x % 24 ? '#20a040' : '#f0e020'}"/>`;
      const busy = await png(
        240,
        240,
        `<rect width="240" height="240" fill="#3050d0"/>${stripes}<rect x="60" y="40" width="120" height="170" fill="#cc2a1e"/>`,
      );
      const error = await sut
        .generate(request('fashion_swap_half', 'upper', { clothes: busy, person: await person() }))
        .catch((e: unknown) => e);

      expect((error as PermanentEngineError).code).toBe('unsupported_input');
      expect((error as Error).message).toMatch(/^The clothes image needs the garment alone on a plain/);
    });
  });

  describe('fashion_swap_half', () => {
    it('upper changes the chest and not the shins; lower changes the shins and not the chest', async () => {
      const personPng = await person();
      const before = await decode(personPng);
      const upper = raw(
        await sut.generate(request('fashion_swap_half', 'upper', { clothes: await tshirt(), person: personPng })),
      );
      const lower = raw(
        await sut.generate(request('fashion_swap_half', 'lower', { clothes: await trousers(), person: personPng })),
      );

      expect([upper.width, upper.height, lower.width, lower.height]).toEqual([600, 800, 600, 800]);
      expect(meanDiff(before, upper, CHEST)).toBeGreaterThan(40);
      expect(meanDiff(before, upper, SHINS)).toBe(0);
      expect(meanDiff(before, lower, SHINS)).toBeGreaterThan(40);
      expect(meanDiff(before, lower, CHEST)).toBe(0);
    });
  });

  describe('lengerie', () => {
    it('puts the garment on the chest, output the person image size', async () => {
      const personPng = await person();
      const before = await decode(personPng);
      const top = await png(
        200,
        120,
        '<rect width="200" height="120" fill="#fff"/><path d="M20 30 L180 30 L170 100 L30 100 Z" fill="#d01c7a"/>',
      );
      const after = raw(await sut.generate(request('lengerie', 'lengerie_swap', { clothes: top, person: personPng })));

      expect([after.width, after.height]).toEqual([600, 800]);
      expect(meanDiff(before, after, { left: 265, top: 170, width: 70, height: 40 })).toBeGreaterThan(40);
      expect(meanDiff(before, after, SHINS)).toBe(0);
    });
  });

  describe('fashion_card', () => {
    it('centres the keyed garment on a 1024x1280 light card with light margins', async () => {
      const card = raw(await sut.generate(request('fashion_card', 'product_card', { clothes: await tshirt() })));

      expect([card.width, card.height, card.channels]).toEqual([1024, 1280, 3]);
      // Margins: the outer 10% on every side is light and neutral.
      const margins: Region[] = [
        { left: 0, top: 0, width: 1024, height: 128 },
        { left: 0, top: 1152, width: 1024, height: 128 },
        { left: 0, top: 0, width: 100, height: 1280 },
        { left: 924, top: 0, width: 100, height: 1280 },
      ];
      for (const margin of margins) {
        for (const channel of meanColour(card, margin)) expect(channel).toBeGreaterThan(220);
      }
      // The garment (red) is centred: its bounding box's middle is within 2% of the card's centre line.
      let left = card.width;
      let right = 0;
      for (let y = 0; y < card.height; y++) {
        for (let x = 0; x < card.width; x++) {
          const p = (y * card.width + x) * 3;
          if (card.data[p] > 150 && card.data[p + 1] < 90) {
            left = min(left, x);
            right = max(right, x);
          }
        }
      }
      expect(right - left).toBeGreaterThan(card.width * 0.5);
      expect(abs((left + right) / 2 - card.width / 2)).toBeLessThan(card.width * 0.02);
      expect(meanColour(card, { left: 487, top: 600, width: 50, height: 50 })[0]).toBeGreaterThan(150);
    });
  });

  describe('furniture', () => {
    it('places the piece on the floor: the lower part changes, the ceiling and upper wall do not', async () => {
      const roomPng = await room();
      const before = await decode(roomPng);
      const after = raw(
        await sut.generate(request('furniture', 'furniture_placement', { room: roomPng, furniture: await chair() })),
      );

      expect([after.width, after.height]).toEqual([320, 200]);
      expect(meanDiff(before, after, { left: 0, top: 0, width: 320, height: 40 })).toBe(0);
      expect(meanDiff(before, after, { left: 130, top: 120, width: 60, height: 40 })).toBeGreaterThan(30);
      // The floor either side of the piece is untouched.
      expect(meanDiff(before, after, { left: 0, top: 150, width: 40, height: 50 })).toBe(0);
    });
  });

  describe('fabric', () => {
    it('retextures inside the object, keeps its shading and leaves the backdrop unchanged', async () => {
      const target = await cushion();
      const before = await decode(target);
      const after = raw(await sut.generate(request('fabric', 'fabric_retexture', { fabric: await fabric(), target })));

      expect([after.width, after.height]).toEqual([240, 160]);
      expect(meanDiff(before, after, { left: 0, top: 0, width: 240, height: 20 })).toBe(0);
      expect(meanDiff(before, after, { left: 0, top: 0, width: 30, height: 160 })).toBe(0);
      expect(meanDiff(before, after, { left: 0, top: 140, width: 240, height: 20 })).toBe(0);
      // Inside: the fabric's blue shows through ...
      const shaded = meanColour(after, { left: 50, top: 40, width: 60, height: 80 });
      const lit = meanColour(after, { left: 130, top: 40, width: 60, height: 80 });
      expect(lit[2]).toBeGreaterThan(lit[0] + 20);
      // ... and the shaded half stays darker than the lit half.
      expect(lum(shaded)).toBeLessThan(lum(lit) * 0.85);
    });
  });

  describe('default (enhance)', () => {
    it('keeps the size and raises the contrast of a dull photo', async () => {
      const photo = await dullPhoto();
      const before = await decode(photo);
      const after = raw(
        await sut.generate(request('default', 'enhance', { image: photo }, { prompt: 'brighter please' })),
      );

      expect([after.width, after.height, after.channels]).toEqual([200, 120, 3]);
      expect(lumaStdDev(after)).toBeGreaterThan(lumaStdDev(before) * 1.3);
    });

    it('applies the EXIF orientation', async () => {
      const rotated = await sharp(await dullPhoto())
        .jpeg()
        .withMetadata({ orientation: 6 })
        .toBuffer();
      const after = raw(await sut.generate(request('default', 'enhance', { image: rotated })));

      expect([after.width, after.height]).toEqual([120, 200]);
    });
  });

  describe('progress', () => {
    it.each([
      ['fashion_swap_half', 'upper', async () => ({ clothes: await tshirt(), person: await person() })],
      ['fashion_card', 'product_card', async () => ({ clothes: await tshirt() })],
      ['furniture', 'furniture_placement', async () => ({ room: await room(), furniture: await chair() })],
      ['fabric', 'fabric_retexture', async () => ({ fabric: await fabric(), target: await cushion() })],
      ['default', 'enhance', async () => ({ image: await dullPhoto() })],
    ] as const)('%s / %s reports its steps rising, below 1, before its result', async (tool, type, images) => {
      const events: (number | 'result')[] = [];

      await sut.generate({ ...request(tool, type, await images()), onProgress: (fraction) => events.push(fraction) });
      events.push('result');

      const reports = events.slice(0, -1) as number[];
      expect(events.at(-1)).toBe('result');
      expect(reports.length).toBeGreaterThanOrEqual(3);
      expect(reports).toEqual([...reports].sort((a, b) => a - b));
      expect(new Set(reports).size).toBe(reports.length);
      expect(reports[0]).toBeGreaterThan(0);
      expect(reports.at(-1)).toBeLessThan(1);
    });

    it('reports nothing past the step at which a cancelled job stopped', async () => {
      const controller = new AbortController();
      const reports: number[] = [];
      const onProgress = (fraction: number) => {
        reports.push(fraction);
        controller.abort(new Error('canceled'));
      };

      const failure = await sut
        .generate({
          ...request('fashion_card', 'product_card', { clothes: await tshirt() }),
          signal: controller.signal,
          onProgress,
        })
        .catch((error: unknown) => error);

      expect(failure).toEqual(new Error('canceled'));
      expect(reports).toHaveLength(1);
    });
  });

  describe('failures', () => {
    it('rejects a buffer that is not an image with invalid_image', async () => {
      const error = await sut
        .generate(request('default', 'enhance', { image: Buffer.from('definitely not an image') }))
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(PermanentEngineError);
      expect((error as PermanentEngineError).code).toBe('invalid_image');
    });

    it('rejects an undecodable garment with invalid_image', async () => {
      const error = await sut
        .generate(
          request('fashion_swap_half', 'upper', {
            clothes: Buffer.from([0xff, 0xd8, 0xff, 0x00]),
            person: await person(),
          }),
        )
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(PermanentEngineError);
      expect((error as PermanentEngineError).code).toBe('invalid_image');
    });

    it('rejects a missing input with invalid_image', async () => {
      const error = await sut
        .generate(request('furniture', 'furniture_placement', { room: await room() }))
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(PermanentEngineError);
      expect((error as PermanentEngineError).code).toBe('invalid_image');
    });

    it('rejects an unknown tool or generation type with engine_failed', async () => {
      const error = await sut
        .generate(request('fashion_swap_half', 'sideways', { image: await dullPhoto() }))
        .catch((e: unknown) => e);

      expect(error).toBeInstanceOf(PermanentEngineError);
      expect((error as PermanentEngineError).code).toBe('engine_failed');
      expect(sut.supports('fashion_swap_half', 'upper')).toBe(true);
      expect(sut.supports('toString', 'enhance')).toBe(false);
    });

    it('stops when the job was cancelled', async () => {
      const controller = new AbortController();
      controller.abort();

      await expect(
        sut.generate({ ...request('default', 'enhance', { image: await dullPhoto() }), signal: controller.signal }),
      ).rejects.toMatchObject({
        name: 'AbortError',
      });
    });
  });
});
