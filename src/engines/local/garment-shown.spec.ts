import { PermanentEngineError } from '../engine.js';
import type { Cutout } from './cutout.js';
import { keepWithin, requireGarmentShown } from './fashion-swap.pipeline.js';
import type { Plane } from './raw-image.js';

const SIZE = 40;
const ADVICE = 'a photo of one person facing the camera, the upper body in view';

/** An opaque square garment, as big as the photo. */
function garment(): Cutout {
  const data = Buffer.alloc(SIZE * SIZE * 4, 0);
  for (let i = 3; i < data.length; i += 4) data[i] = 255;
  return { image: { data, width: SIZE, height: SIZE, channels: 4 }, left: 0, top: 0 };
}

/** A mask over the photo: 255 inside the rows [from, to), 0 elsewhere. */
function rows(from: number, to: number): Plane {
  const data = new Uint8Array(SIZE * SIZE);
  data.fill(255, from * SIZE, to * SIZE);
  return { data, width: SIZE, height: SIZE };
}

function refusal(within: Plane, front: Plane): PermanentEngineError | undefined {
  try {
    requireGarmentShown(keepWithin(garment(), 0, 0, within, front), ADVICE);
    return undefined;
  } catch (error) {
    if (error instanceof PermanentEngineError) return error;
    throw error;
  }
}

describe('a try-on whose garment would barely change the photo', () => {
  it('is refused when the person outline leaves the garment almost nowhere to go, naming that cause', () => {
    const sut = refusal(rows(0, 6), rows(0, 0));

    expect(sut?.code).toBe('unsupported_input');
    expect(sut?.message).toContain('the photo shows no person to put it on');
    expect(sut?.message).toContain(ADVICE);
  });

  it('is refused when the arms or hair in front cover almost all of it, naming that cause', () => {
    const sut = refusal(rows(0, SIZE), rows(0, 35));

    expect(sut?.code).toBe('unsupported_input');
    expect(sut?.message).toContain("the person's arms or hair cover where it goes");
  });

  it('is made when most of the garment lies on the person in plain view', () => {
    expect(refusal(rows(0, SIZE), rows(0, 10))).toBeUndefined();
  });

  it('is refused when nothing of the garment is in the frame', () => {
    const shown = keepWithin(garment(), SIZE, SIZE, rows(0, SIZE), rows(0, 0));

    expect(() => requireGarmentShown(shown, ADVICE)).toThrow(PermanentEngineError);
  });
});
