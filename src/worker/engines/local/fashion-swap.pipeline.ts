/**
 * Virtual try-on without ML: the garment is keyed out of its (plain) background, fitted to the person's body
 * landmarks (width from the torso / hips, top at the shoulders / waist, a limited vertical stretch to span the
 * target band) and composited onto the person with a subtle soft shadow. Output size = the person image.
 *
 * Regions:
 * - `upper`: shoulders to hips (t-shirts, shirts, jackets);
 * - `lower`: waist to ankles (trousers, skirts);
 * - `dress`: shoulders to below the knees (long one-piece garments);
 * - `lingerie`: a close-fitting top from the shoulders down, no stretch (several keyed parts are kept, so a
 *   set photographed as two pieces stays together);
 * - `auto` (fashion_swap_full): `lower` when the garment has two legs, `dress` when it is long, else `upper`.
 */
import { type BodyLandmarks, estimateBody } from './body.js';
import { alphaOf, applyShade, compositeOver, featherEllipse, softShadow } from './compose.js';
import { extractForeground, keyBackground, runAt } from './keying.js';
import type { Pipeline, PipelineContext } from './pipeline.js';
import { type Plane, type RawImage, clamp, resizeRgba } from './raw-image.js';

export type GarmentRegion = 'upper' | 'lower' | 'dress' | 'lingerie';

/** `fashion_swap` / `fashion_swap_full`: region chosen from the garment's shape. */
export const fashionSwapFullPipeline: Pipeline = (ctx) => tryOn(ctx, 'auto');
/** `fashion_swap_half` / `upper`. */
export const fashionSwapUpperPipeline: Pipeline = (ctx) => tryOn(ctx, 'upper');
/** `fashion_swap_half` / `lower`. */
export const fashionSwapLowerPipeline: Pipeline = (ctx) => tryOn(ctx, 'lower');
/** `lengerie` / `lengerie_swap`. */
export const lingerieSwapPipeline: Pipeline = (ctx) => tryOn(ctx, 'lingerie');

async function tryOn(ctx: PipelineContext, requested: GarmentRegion | 'auto'): Promise<RawImage> {
  const [clothes, person] = await Promise.all([ctx.image('clothes', { alpha: true }), ctx.image('person')]);
  ctx.checkpoint();

  const key = keyBackground(clothes, { keepRatio: requested === 'lingerie' ? 0.2 : 1 });
  let garment = extractForeground(clothes, key);
  if (!key.reliable) {
    garment = featherEllipse(garment);
  }
  const garmentAlpha = alphaOf(garment);
  const region = requested === 'auto' ? classifyGarment(garmentAlpha) : requested;
  const body = estimateBody(person);
  ctx.checkpoint();

  const fit = fitGarment(garmentAlpha, region, body);
  const width = Math.max(1, Math.round(garment.width * fit.scaleX));
  const height = Math.max(1, Math.round(garment.height * fit.scaleY));
  const fitted = await resizeRgba(garment, width, height);
  ctx.checkpoint();
  const left = Math.round(body.centreX - fit.anchorX * fit.scaleX);
  const top = Math.round(fit.top);

  // Subtle shadow cast by the garment onto the body, slightly down and to the right.
  const sigma = Math.max(1.5, body.height * 0.007);
  const pad = Math.ceil(sigma * 3);
  const shadow = await softShadow(alphaOf(fitted), sigma, pad);
  ctx.checkpoint();
  const output: RawImage = { ...person, data: Buffer.from(person.data) };
  applyShade(output, shadow, left - pad + Math.round(body.height * 0.002), top - pad + Math.round(body.height * 0.006), 0.35);
  compositeOver(output, fitted, left, top);
  return output;
}

interface Fit {
  scaleX: number;
  scaleY: number;
  /** Garment column (in garment pixels) that goes on the body's centre line. */
  anchorX: number;
  /** Output row of the garment's top edge. */
  top: number;
}

/** Where and how large the garment goes on the body. */
export function fitGarment(alpha: Plane, region: GarmentRegion, body: BodyLandmarks): Fit {
  const h = body.height;
  const spec = {
    upper: { rows: [0.55, 0.85], target: body.torsoWidth * 1.12, top: body.shoulderY - 0.01 * h, bottom: body.hipY + 0.03 * h, stretch: [0.85, 1.2] },
    lower: { rows: [0.02, 0.1], target: body.hipWidth * 1.06, top: body.waistY, bottom: body.ankleY, stretch: [0.8, 1.3] },
    dress: { rows: [0.22, 0.35], target: body.torsoWidth * 1.1, top: body.shoulderY - 0.01 * h, bottom: body.kneeY + 0.05 * h, stretch: [0.8, 1.3] },
    lingerie: { rows: [0.3, 1], target: body.torsoWidth * 1.12, top: body.shoulderY + 0.005 * h, bottom: Number.NaN, stretch: [1, 1] },
  }[region];
  const measured = region === 'lingerie' ? fullWidth(alpha) : bandWidth(alpha, spec.rows[0], spec.rows[1]);
  const scaleX = spec.target / Math.max(1, measured.width);
  let scaleY = scaleX;
  if (!Number.isNaN(spec.bottom)) {
    const wanted = (spec.bottom - spec.top) / alpha.height;
    scaleY = clamp(wanted, scaleX * spec.stretch[0], scaleX * spec.stretch[1]);
  }
  return { scaleX, scaleY, anchorX: measured.centre, top: spec.top };
}

/** `lower` when the bottom of the garment splits into two legs, `dress` when it is long, else `upper`. */
export function classifyGarment(alpha: Plane): GarmentRegion {
  const { width, height } = alpha;
  let legRows = 0;
  let rows = 0;
  for (let y = Math.round(height * 0.8); y < Math.round(height * 0.96); y++) {
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
  const y0 = Math.round(alpha.height * from);
  const y1 = Math.max(y0 + 1, Math.round(alpha.height * to));
  for (let y = y0; y < Math.min(y1, alpha.height); y++) {
    const run = runAt(alpha, y, Math.round(alpha.width / 2));
    if (run) {
      widths.push(run.right - run.left);
      centreSum += (run.left + run.right) / 2;
    }
  }
  if (widths.length === 0) {
    return fullWidth(alpha);
  }
  widths.sort((a, b) => a - b);
  return { width: widths[Math.floor(widths.length / 2)], centre: centreSum / widths.length };
}

function fullWidth(alpha: Plane): { width: number; centre: number } {
  return { width: alpha.width, centre: alpha.width / 2 };
}
