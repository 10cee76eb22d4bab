import { readFile } from 'node:fs/promises';
import sharp from 'sharp';
import { decode, meanColour, meanDiff, raw } from '../../../test/support/pixels.js';
import { PermanentEngineError } from '../engine.js';
import { LocalEngine } from './local.engine.js';

/** A real photo from the test fixtures (see test/fixtures/photos/README.md for their licences). */
const photo = (file: string) => readFile(`test/fixtures/photos/${file}`);
const example = (path: string) => readFile(`docs/examples/${path}`);

const failureOf = (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    () => undefined,
    (error: unknown) => error,
  );

/**
 * The object tools cut their object out of its background. A photo with a busy background (a cat on a sofa, a cup on
 * a wooden table) cannot be cut out: the job must end with `unsupported_input` and a message saying what works,
 * never with the whole photo drawn in a vignette (what these tools made of such photos before).
 */
describe('the local engine on real photos with busy backgrounds', () => {
  const sut = new LocalEngine();

  it.each([
    ['fashion_card', 'product_card', async () => ({ clothes: await photo('chelsea.png') }), 'clothes'],
    [
      'furniture',
      'furniture_placement',
      async () => ({ room: await example('furniture/input-room.jpg'), furniture: await photo('coffee.png') }),
      'furniture',
    ],
    [
      'fabric',
      'fabric_retexture',
      async () => ({ fabric: await example('fabric/input-fabric.jpg'), target: await photo('chelsea.png') }),
      'target',
    ],
  ] as const)(
    '%s refuses the photo with unsupported_input, naming the %s input',
    async (tool, type, images, input) => {
      const failure = await sut
        .generate({ jobId: 'job-1', tool, generationType: type, images: await images(), texts: {} })
        .then(
          () => undefined,
          (error: unknown) => error,
        );

      expect(failure).toBeInstanceOf(PermanentEngineError);
      expect((failure as PermanentEngineError).code).toBe('unsupported_input');
      expect((failure as Error).message).toMatch(
        new RegExp(`^The ${input} image needs .* on a plain, evenly coloured background`),
      );
    },
    30_000,
  );
});

/**
 * A catalogue shot is often cropped at the piece's feet: the object (cup-on-white-cropped.jpg, a cup and saucer on
 * pure white, 360x200, the saucer cut by the bottom edge) stands on one edge of the frame, with plain white along the
 * other three. The object tools take it (what they refused before, blaming a busy background).
 */
describe('the local engine on a real object on plain white, standing on the bottom edge', () => {
  const sut = new LocalEngine();
  /** Where furniture_placement stands the piece in the example room (800x600): centred, on the floor. */
  const PIECE = { left: 330, top: 330, width: 140, height: 100 };
  const CEILING = { left: 0, top: 0, width: 800, height: 60 };

  it('furniture places the piece in the room: the room changes where the piece goes, with its colours', async () => {
    const roomJpg = await example('furniture/input-room.jpg');
    const before = await decode(roomJpg);

    const after = raw(
      await sut.generate({
        jobId: 'job-1',
        tool: 'furniture',
        generationType: 'furniture_placement',
        images: { room: roomJpg, furniture: await photo('cup-on-white-cropped.jpg') },
        texts: {},
      }),
    );

    expect([after.width, after.height]).toEqual([800, 600]);
    expect(meanDiff(before, after, PIECE)).toBeGreaterThan(60);
    // The cup's red-brown glaze, not the white it was photographed on.
    const [r, g, b] = meanColour(after, PIECE);
    expect(r).toBeGreaterThan(g + 40);
    expect(r).toBeGreaterThan(b + 40);
    expect(meanDiff(before, after, CEILING)).toBe(0);
  }, 30_000);

  it.each([
    ['fashion_card', 'product_card', async () => ({ clothes: await photo('cup-on-white-cropped.jpg') })],
    [
      'fabric',
      'fabric_retexture',
      async () => ({
        fabric: await example('fabric/input-fabric.jpg'),
        target: await photo('cup-on-white-cropped.jpg'),
      }),
    ],
  ] as const)(
    '%s takes it too',
    async (tool, type, images) => {
      await expect(
        sut.generate({ jobId: 'job-1', tool, generationType: type, images: await images(), texts: {} }),
      ).resolves.toMatchObject({ kind: 'raw' });
    },
    30_000,
  );

  it('refuses the object cropped on three sides, saying it fills the frame (not that the background is busy)', async () => {
    const tight = await sharp(await photo('cup-on-white-cropped.jpg'))
      .extract({ left: 100, top: 0, width: 140, height: 200 })
      .jpeg()
      .toBuffer();

    const failure = await failureOf(
      sut.generate({
        jobId: 'job-1',
        tool: 'furniture',
        generationType: 'furniture_placement',
        images: { room: await example('furniture/input-room.jpg'), furniture: tight },
        texts: {},
      }),
    );

    expect((failure as PermanentEngineError).code).toBe('unsupported_input');
    expect((failure as Error).message).toMatch(/the furniture fills the frame, running off three or four of its edges/);
    expect((failure as Error).message).not.toMatch(/busy/);
  }, 30_000);
});

/**
 * Two people side by side (astronaut-twice.jpg: the portrait twice, 768x384). A try-on dresses one person: the job is
 * refused, naming the cause, never `complete` with the photo as it was (what a lower-half try-on on two people did).
 */
describe('the local engine on a photo of two people', () => {
  const sut = new LocalEngine();

  it.each(['upper', 'lower'] as const)(
    'fashion_swap_half %s: unsupported_input, saying there is more than one person and which photo works',
    async (type) => {
      const failure = await failureOf(
        sut.generate({
          jobId: 'job-1',
          tool: 'fashion_swap_half',
          generationType: type,
          images: {
            clothes: await example(`fashion_swap_half-${type}/input-clothes.jpg`),
            person: await photo('astronaut-twice.jpg'),
          },
          texts: {},
        }),
      );

      expect((failure as PermanentEngineError).code).toBe('unsupported_input');
      expect((failure as Error).message).toMatch(/^The person image shows more than one person.*one person alone/);
    },
    30_000,
  );
});

/**
 * The person tools find the person with the pose and segmentation models. The portrait (astronaut.jpg, 512x512) is
 * head to waist: her face is at about x 175..275, y 40..190; her orange suit fills x 40..360 below y 300.
 */
describe('the local engine on a real portrait', () => {
  const sut = new LocalEngine();
  const FACE = { left: 185, top: 50, width: 80, height: 120 };
  const TORSO = { left: 120, top: 320, width: 160, height: 120 };
  const SHUTTLE = { left: 400, top: 0, width: 112, height: 120 };

  it('fashion_swap_half upper dresses the torso and leaves the face and the background as they were', async () => {
    const portrait = await photo('astronaut.jpg');
    const clothes = await example('fashion_swap_half-upper/input-clothes.jpg');
    const before = await decode(portrait);

    const after = raw(
      await sut.generate({
        jobId: 'job-1',
        tool: 'fashion_swap_half',
        generationType: 'upper',
        images: { clothes, person: portrait },
        texts: {},
      }),
    );

    expect([after.width, after.height]).toEqual([512, 512]);
    expect(meanDiff(before, after, TORSO)).toBeGreaterThan(40);
    expect(meanDiff(before, after, FACE)).toBe(0);
    expect(meanDiff(before, after, SHUTTLE)).toBe(0);
  }, 30_000);

  it.each([
    [
      'fashion_swap',
      'fashion_swap_full',
      'fashion_swap',
      /the knees and ankles are not in view\. Use a full-length photo/,
    ],
    [
      'fashion_swap_half',
      'lower',
      'fashion_swap_half-lower',
      /the knees and ankles are not in view\. Use a full-length photo/,
    ],
  ] as const)(
    '%s / %s on the portrait: unsupported_input, saying which photo works',
    async (tool, type, folder, message) => {
      const failure = await failureOf(
        sut.generate({
          jobId: 'job-1',
          tool,
          generationType: type,
          images: { clothes: await example(`${folder}/input-clothes.jpg`), person: await photo('astronaut.jpg') },
          texts: {},
        }),
      );

      expect((failure as PermanentEngineError).code).toBe('unsupported_input');
      expect((failure as Error).message).toMatch(message);
    },
    30_000,
  );

  it.each(['chelsea.png', 'coffee.png'])(
    'a photo with no person in it (%s) is no_person_found',
    async (file) => {
      const failure = await failureOf(
        sut.generate({
          jobId: 'job-1',
          tool: 'fashion_swap_half',
          generationType: 'upper',
          images: { clothes: await example('fashion_swap_half-upper/input-clothes.jpg'), person: await photo(file) },
          texts: {},
        }),
      );

      expect(failure).toBeInstanceOf(PermanentEngineError);
      expect((failure as PermanentEngineError).code).toBe('no_person_found');
    },
    30_000,
  );
});
