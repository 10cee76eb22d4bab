import { readFile } from 'node:fs/promises';
import { PermanentEngineError } from '../engine.js';
import { LocalEngine } from './local.engine.js';

/** A real photo from the test fixtures (see test/fixtures/photos/README.md for their licences). */
const photo = (name: string) => readFile(`test/fixtures/photos/${name}.png`);
const example = (path: string) => readFile(`docs/examples/${path}`);

/**
 * The object tools cut their object out of its background. A photo with a busy background (a cat on a sofa, a cup on
 * a wooden table) cannot be cut out: the job must end with `unsupported_input` and a message saying what works,
 * never with the whole photo drawn in a vignette (what these tools made of such photos before).
 */
describe('the local engine on real photos with busy backgrounds', () => {
  const sut = new LocalEngine();

  it.each([
    ['fashion_card', 'product_card', async () => ({ clothes: await photo('chelsea') }), 'clothes'],
    [
      'furniture',
      'furniture_placement',
      async () => ({ room: await example('furniture/input-room.jpg'), furniture: await photo('coffee') }),
      'furniture',
    ],
    [
      'fabric',
      'fabric_retexture',
      async () => ({ fabric: await example('fabric/input-fabric.jpg'), target: await photo('chelsea') }),
      'target',
    ],
  ] as const)(
    '%s refuses the photo with unsupported_input, naming the %s input',
    async (tool, type, images, input) => {
      const failure = await sut.generate({ tool, generationType: type, images: await images(), texts: {} }).then(
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
