/**
 * Virtual try-on: the garment is keyed out of its (plain) background, fitted to the person's body landmarks found
 * by the pose and segmentation models (width from the torso / hips, top at the shoulders / waist, a limited
 * vertical stretch to span the target band) and composited onto the person with a subtle soft shadow, behind
 * the head, hair and forearms and never over the background away from the person. Output size = the person image.
 *
 * Regions:
 * - `upper`: shoulders to hips (t-shirts, shirts, jackets);
 * - `lower`: waist to ankles (trousers, skirts);
 * - `dress`: shoulders to below the knees (long one-piece garments);
 * - `lingerie`: a close-fitting top from the shoulders down, no stretch (several keyed parts are kept, so a
 *   set photographed as two pieces stays together);
 * - `auto` (fashion_swap_full): `lower` when the garment has two legs, `dress` when it is long, else `upper`.
 */
import { PermanentEngineError } from '../engine.js';
import { type BodyLandmarks, type BodyPart, fitPerson } from './body.js';
import { alphaOf, applyShade, compositeOver, softShadow } from './compose.js';
import { type Cutout, analyseObject, cutoutAt, requireCutOut } from './cutout.js';
import { runAt } from './keying.js';
import { analysePerson } from './person-model.js';
import type { Pipeline, PipelineContext } from './pipeline.js';
import { type Plane, type RawImage, clamp, clampByte } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { ceil, floor, max, min, round } = Math;

export type GarmentRegion = 'upper' | 'lower' | 'dress' | 'lingerie';

/** `fashion_swap` / `fashion_swap_full`: region chosen from the garment's shape. */
export const fashionSwapFullPipeline: Pipeline = (ctx) => tryOn(ctx, 'auto');
/** `fashion_swap_half` / `upper`. */
export const fashionSwapUpperPipeline: Pipeline = (ctx) => tryOn(ctx, 'upper');
/** `fashion_swap_half` / `lower`. */
export const fashionSwapLowerPipeline: Pipeline = (ctx) => tryOn(ctx, 'lower');
/** `lengerie` / `lengerie_swap`. */
export const lingerieSwapPipeline: Pipeline = (ctx) => tryOn(ctx, 'lingerie');

/** The body parts each try-on needs in the person photo, and the photo that shows them. */
const NEEDS: Record<GarmentRegion | 'auto', { parts: BodyPart[]; photo: string }> = {
  upper: { parts: ['shoulders'], photo: 'a photo showing the person from the head to at least the chest' },
  lingerie: { parts: ['shoulders', 'hips'], photo: 'a photo showing the person from the head to the hips or below' },
  dress: {
    parts: ['shoulders', 'hips', 'knees'],
    photo: 'a photo showing the person from the head to the knees or below',
  },
  lower: { parts: ['hips', 'knees', 'ankles'], photo: 'a full-length photo of the person, head to feet' },
  auto: { parts: ['shoulders', 'hips', 'knees', 'ankles'], photo: 'a full-length photo of the person, head to feet' },
};

async function tryOn(ctx: PipelineContext, requested: GarmentRegion | 'auto'): Promise<RawImage> {
  const [clothes, person] = await Promise.all([ctx.image('clothes', { alpha: true }), ctx.image('person')]);
  ctx.checkpoint(0.1);
  const keyOptions = { keepRatio: requested === 'lingerie' ? 0.2 : 1 };
  const [garment, seen] = await Promise.all([analyseObject(clothes, keyOptions), analysePerson(person)]);
  ctx.checkpoint(0.5);
  requireCutOut(garment, 'clothes', 'the garment alone');
  const { body, front, within } = await fitPerson(seen, NEEDS[requested].parts, NEEDS[requested].photo);
  ctx.checkpoint(0.6);

  const region = requested !== 'auto' ? requested : classifyGarment(garment.silhouette);
  const fit = fitGarment(garment.silhouette, region, body);
  // Whatever the measurements say, the garment is never drawn more than 1.2x the person image's size.
  const bound = min(
    1,
    (person.width * 1.2) / (garment.silhouette.width * fit.scaleX),
    (person.height * 1.2) / (garment.silhouette.height * fit.scaleY),
  );
  fit.scaleX *= bound;
  fit.scaleY *= bound;
  const width = max(1, round(garment.silhouette.width * fit.scaleX));
  const height = max(1, round(garment.silhouette.height * fit.scaleY));
  const cut = await cutoutAt(clothes, garment, width, height);
  ctx.checkpoint(0.75);
  const left = round(body.centreX - fit.anchorX * fit.scaleX) - cut.left;
  const top = round(fit.top) - cut.top;
  requireGarmentShown(keepWithin(cut, left, top, within, front), NEEDS[requested].photo);

  // Subtle shadow cast by the garment onto the body, slightly down and to the right.
  const sigma = max(1.5, body.height * 0.007);
  const pad = ceil(sigma * 3);
  const shadow = softShadow(alphaOf(cut.image), sigma, pad);
  ctx.checkpoint(0.85);
  const output: RawImage = { ...person, data: Buffer.from(person.data) };
  applyShade(output, shadow, left - pad + round(body.height * 0.002), top - pad + round(body.height * 0.006), 0.35);
  compositeOver(output, cut.image, left, top);
  restoreFront(output, person, front);
  return output;
}

/** How much of the garment is drawn: its alpha summed, as planned, on the person, and in front of nothing. */
interface Shown {
  planned: number;
  onPerson: number;
  drawn: number;
}

/**
 * Clears the garment's alpha where it would leave the person (`within`) or pass in front of them (`front`), and
 * says how much of it was left.
 */
export function keepWithin(cut: Cutout, left: number, top: number, within: Plane, front: Plane): Shown {
  const { image } = cut;
  const shown: Shown = { planned: 0, onPerson: 0, drawn: 0 };
  for (let y = 0; y < image.height; y++) {
    const outY = top + y;
    for (let x = 0; x < image.width; x++) {
      const outX = left + x;
      const a = (y * image.width + x) * 4 + 3;
      if (outX < 0 || outY < 0 || outX >= within.width || outY >= within.height) {
        image.data[a] = 0;
        continue;
      }
      const at = outY * within.width + outX;
      const onPerson = (image.data[a] * within.data[at]) / 255;
      shown.planned += image.data[a];
      shown.onPerson += onPerson;
      image.data[a] = (onPerson * (255 - front.data[at])) / 255;
      shown.drawn += image.data[a];
    }
  }
  return shown;
}

/** Less of the garment than this share of it, once fitted in the frame, is no try-on. */
const MIN_SHOWN = 0.25;

/**
 * Refuses a try-on that would hand back the photo (almost) as it was: the garment, fitted where the pose model put
 * the body, lies off the person the segmentation model outlined (the body part is hidden, or the person does not
 * stand out from the background), or behind their arms and hair.
 */
export function requireGarmentShown(shown: Shown, photoAdvice: string): void {
  if (shown.drawn >= shown.planned * MIN_SHOWN && shown.planned > 0) return;
  const cause =
    shown.onPerson < shown.planned * MIN_SHOWN
      ? 'where the body was found, the photo shows no person to put it on (that part of the body is hidden, ' +
        'or the person does not stand out from what is around them)'
      : "the person's arms or hair cover where it goes";
  throw new PermanentEngineError(
    'unsupported_input',
    `The garment could not be put on the person in the person image: ${cause}. Use ${photoAdvice}, ` +
      'the person alone and in plain view.',
  );
}

/** The person's own pixels back where they are in front (and the garment's shadow may have fallen there). */
function restoreFront(output: RawImage, person: RawImage, front: Plane): void {
  for (let i = 0; i < front.data.length; i++) {
    const f = front.data[i];
    if (f === 0) continue;
    for (let c = 0; c < 3; c++) {
      const at = i * 3 + c;
      output.data[at] = clampByte(output.data[at] + ((person.data[at] - output.data[at]) * f) / 255);
    }
  }
}

interface Fit {
  scaleX: number;
  scaleY: number;
  /** Garment column (in garment pixels) that goes on the body's centre line. */
  anchorX: number;
  /** Output row of the garment's top edge. */
  top: number;
}

interface RegionSpec {
  /** Garment rows (fractions of its height) whose central width is matched to `target`; null: full width. */
  rows: [number, number] | null;
  /** Body width the measured garment width is scaled to. */
  target: number;
  /** Output rows the garment's top edge goes to, and its bottom edge should reach (null: no stretch). */
  top: number;
  bottom: number | null;
  /** Allowed vertical stretch relative to the horizontal scale. */
  stretch: [number, number];
}

/** Where and how large the garment goes on the body. */
function fitGarment(alpha: Plane, region: GarmentRegion, body: BodyLandmarks): Fit {
  const h = body.height;
  const specs: Record<GarmentRegion, RegionSpec> = {
    // Body width below the sleeves matched to the torso (a little loose); collar at the shoulders; hem at the hips.
    upper: {
      rows: [0.55, 0.85],
      target: body.torsoWidth * 1.12,
      top: body.shoulderY - 0.01 * h,
      bottom: body.hipY + 0.03 * h,
      stretch: [0.9, 1.15],
    },
    // Waistband matched to the hips; waist to ankles.
    lower: {
      rows: [0.02, 0.1],
      target: body.hipWidth * 1.06,
      top: body.waistY,
      bottom: body.ankleY,
      stretch: [0.85, 1.2],
    },
    // Bodice matched to the torso; shoulders to below the knees.
    dress: {
      rows: [0.22, 0.35],
      target: body.torsoWidth * 1.1,
      top: body.shoulderY - 0.01 * h,
      bottom: body.kneeY + 0.05 * h,
      stretch: [0.9, 1.15],
    },
    // Whole width matched to the torso, straps at the shoulders, never stretched.
    lingerie: {
      rows: null,
      target: body.torsoWidth * 1.12,
      top: body.shoulderY + 0.005 * h,
      bottom: null,
      stretch: [1, 1],
    },
  };
  const spec = specs[region];
  const measured = spec.rows ? bandWidth(alpha, spec.rows[0], spec.rows[1]) : fullWidth(alpha);
  // Never wider than 65% of the figure height (a mis-measured band must not blow the garment up).
  const scaleX = min(spec.target / max(1, measured.width), (0.65 * h) / alpha.width);
  const scaleY =
    spec.bottom === null
      ? scaleX
      : clamp((spec.bottom - spec.top) / alpha.height, scaleX * spec.stretch[0], scaleX * spec.stretch[1]);
  return { scaleX, scaleY, anchorX: measured.centre, top: spec.top };
}

/** `lower` when the bottom of the garment splits into two legs, `dress` when it is long, else `upper`. */
function classifyGarment(alpha: Plane): GarmentRegion {
  const { width, height } = alpha;
  let legRows = 0;
  let rows = 0;
  for (let y = round(height * 0.8); y < round(height * 0.96); y++) {
    rows++;
    const runs = runsOf(alpha, y).filter((r) => r.right - r.left >= width * 0.1);
    if (runs.length >= 2) {
      const centre = width / 2;
      const gapAtCentre = runs.every((r) => r.right <= centre || r.left > centre);
      if (gapAtCentre) legRows++;
    }
  }
  if (rows > 0 && legRows >= rows * 0.6) {
    return 'lower';
  }
  return height / width > 1.45 ? 'dress' : 'upper';
}

function runsOf(alpha: Plane, y: number): { left: number; right: number }[] {
  const runs: { left: number; right: number }[] = [];
  const row = y * alpha.width;
  let x = 0;
  while (x < alpha.width) {
    if (alpha.data[row + x] < 128) {
      x++;
      continue;
    }
    const left = x;
    while (x < alpha.width && alpha.data[row + x] >= 128) x++;
    runs.push({ left, right: x });
  }
  return runs;
}

/** Median width and mean centre of the central opaque runs over a band of rows (fractions of the height). */
function bandWidth(alpha: Plane, from: number, to: number): { width: number; centre: number } {
  const widths: number[] = [];
  let centreSum = 0;
  const y0 = round(alpha.height * from);
  const y1 = max(y0 + 1, round(alpha.height * to));
  for (let y = y0; y < min(y1, alpha.height); y++) {
    const run = runAt(alpha, y, round(alpha.width / 2));
    if (run) {
      widths.push(run.right - run.left);
      centreSum += (run.left + run.right) / 2;
    }
  }
  if (widths.length === 0) {
    return fullWidth(alpha);
  }
  widths.sort((a, b) => a - b);
  return { width: widths[floor(widths.length / 2)], centre: centreSum / widths.length };
}

function fullWidth(alpha: Plane): { width: number; centre: number } {
  return { width: alpha.width, centre: alpha.width / 2 };
}
