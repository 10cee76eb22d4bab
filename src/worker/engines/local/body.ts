/**
 * Rough body landmarks of a standing person, from the silhouette keyed against a plain (studio) background,
 * or from standard figure proportions of the frame when the background is busy.
 *
 * Measured on a copy at most 400 px long (plenty for landmarks), reported in the input image's pixels.
 * Rows are in image pixels. `height` is the estimated full figure height (head top to soles) even when the
 * photo is cropped above the feet (estimated from the head-to-shoulder distance in that case).
 */
import { type KeyResult, keyBackground, runAt } from './keying.js';
import { type Plane, type RawImage, clamp, fromRaw, toRawImage } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { floor, max, min, round } = Math;

export interface BodyLandmarks {
  /** True when measured on the keyed silhouette, false when taken from frame proportions. */
  fromSilhouette: boolean;
  top: number;
  height: number;
  centreX: number;
  /** Top of the shoulders (where a collar sits). */
  shoulderY: number;
  chestY: number;
  waistY: number;
  /** Crotch / hip line (where the legs part). */
  hipY: number;
  kneeY: number;
  ankleY: number;
  shoulderWidth: number;
  /** Torso width between chest and waist. */
  torsoWidth: number;
  /** Width across the hips, just above the crotch. */
  hipWidth: number;
}

// Standard proportions of a standing adult, as fractions of the figure height from the head top.
const P = { neck: 0.13, shoulder: 0.165, chest: 0.26, waist: 0.38, hip: 0.5, knee: 0.72, ankle: 0.955 };

/** Long side of the copy the silhouette is measured on (landmarks need no more; keying it is then cheap). */
const ANALYSIS_SIZE = 400;

export async function estimateBody(person: RawImage): Promise<BodyLandmarks> {
  const scale = min(1, ANALYSIS_SIZE / max(person.width, person.height));
  const small =
    scale < 1
      ? await toRawImage(
          fromRaw(person).resize(max(1, round(person.width * scale)), max(1, round(person.height * scale)), {
            fit: 'fill',
          }),
        )
      : person;
  const key = keyBackground(small, { maxBorderNoise: 40, closing: 0 });
  const measured =
    (key.reliable ? measureSilhouette(key, small.width, small.height) : null) ??
    proportional(small.width, small.height);
  return rescale(measured, person.width / small.width, person.height / small.height);
}

function rescale(b: BodyLandmarks, sx: number, sy: number): BodyLandmarks {
  return {
    fromSilhouette: b.fromSilhouette,
    top: b.top * sy,
    height: b.height * sy,
    centreX: (b.centreX + 0.5) * sx - 0.5,
    shoulderY: b.shoulderY * sy,
    chestY: b.chestY * sy,
    waistY: b.waistY * sy,
    hipY: b.hipY * sy,
    kneeY: b.kneeY * sy,
    ankleY: b.ankleY * sy,
    shoulderWidth: b.shoulderWidth * sx,
    torsoWidth: b.torsoWidth * sx,
    hipWidth: b.hipWidth * sx,
  };
}

function proportional(width: number, height: number): BodyLandmarks {
  const top = height * 0.04;
  const h = height * 0.94;
  // Widths from the height, but never wider than the frame allows (a very narrow crop).
  const w = (k: number): number => min(h * k, width * k * 2.5);
  return fromProportions(top, h, width / 2, { shoulderWidth: w(0.25), torsoWidth: w(0.19), hipWidth: w(0.2) }, false);
}

function fromProportions(
  top: number,
  h: number,
  centreX: number,
  widths: Pick<BodyLandmarks, 'shoulderWidth' | 'torsoWidth' | 'hipWidth'>,
  fromSilhouette: boolean,
): BodyLandmarks {
  return {
    fromSilhouette,
    top,
    height: h,
    centreX,
    shoulderY: top + P.shoulder * h,
    chestY: top + P.chest * h,
    waistY: top + P.waist * h,
    hipY: top + P.hip * h,
    kneeY: top + P.knee * h,
    ankleY: top + P.ankle * h,
    ...widths,
  };
}

function measureSilhouette(key: KeyResult, width: number, height: number): BodyLandmarks | null {
  const alpha = key.alpha;
  const { top, bottom, left, right } = key.box;
  const boxH = bottom - top;
  // A person is taller than wide and fills a good part of the frame height.
  if (boxH < height * 0.3 || right - left > boxH * 1.2) {
    return null;
  }
  const centreX = upperCentroidX(alpha, top, top + round(boxH * 0.5));
  const widthAt = (y: number): number => {
    const run = runAt(alpha, clamp(round(y), 0, height - 1), round(centreX));
    return run ? run.right - run.left : 0;
  };

  // Head: widths grow to the head's width, narrow at the neck, then jump at the shoulders.
  const searchEnd = top + round(boxH * 0.45);
  const minRows = max(2, round(boxH * 0.02));
  let headW = 0;
  let shoulderStart = -1;
  for (let y = top; y < searchEnd; y++) {
    const w = widthAt(y);
    if (y - top >= minRows && headW > 0 && w > headW * 1.6) {
      shoulderStart = y;
      break;
    }
    headW = max(headW, w);
  }
  const feetVisible = bottom < height - 2;
  let h: number;
  let shoulderY: number;
  if (shoulderStart > top) {
    // The shoulder slope starts at roughly 0.15 of the figure height.
    const estimated = (shoulderStart - top) / 0.15;
    h = feetVisible ? boxH : max(boxH, estimated);
    if (feetVisible && (estimated < boxH * 0.6 || estimated > boxH * 1.6)) {
      // The head measurement disagrees wildly with the full figure: not a standing person; use proportions.
      shoulderY = top + P.shoulder * h;
    } else {
      shoulderY = shoulderStart;
    }
  } else {
    if (!feetVisible) {
      return null;
    }
    h = boxH;
    shoulderY = top + P.shoulder * h;
  }

  // Crotch: going down from the waist, the first row where the body's centre column is background.
  const base = fromProportions(top, h, centreX, { shoulderWidth: 0, torsoWidth: 0, hipWidth: 0 }, true);
  let hipY = base.hipY;
  const cx = round(centreX);
  for (let y = round(top + h * 0.42); y < min(height, round(top + h * 0.62)); y++) {
    if (alpha.data[y * width + cx] < 128 && widthAt(y) < h * 0.25) {
      hipY = y;
      break;
    }
  }

  const medianWidth = (from: number, to: number): number => {
    const values: number[] = [];
    const step = max(1, round((to - from) / 24));
    for (let y = round(from); y <= round(to); y += step) values.push(widthAt(y));
    values.sort((a, b) => a - b);
    return values[floor(values.length / 2)] ?? 0;
  };
  const shoulderWidth = clamp(medianWidth(shoulderY + h * 0.02, shoulderY + h * 0.05), h * 0.18, h * 0.34);
  const torsoWidth = clamp(medianWidth(top + h * 0.28, top + h * 0.38), h * 0.14, h * 0.3);
  const hipWidth = clamp(medianWidth(hipY - h * 0.06, hipY - h * 0.02), h * 0.15, h * 0.3);
  const ankleY = feetVisible ? min(bottom - h * 0.035, top + P.ankle * h) : top + P.ankle * h;

  return {
    ...base,
    shoulderY,
    chestY: shoulderY + (P.chest - P.shoulder) * h,
    waistY: min(top + P.waist * h, hipY - 0.08 * h),
    hipY,
    kneeY: hipY + (P.knee - P.hip) * h,
    ankleY,
    shoulderWidth,
    torsoWidth,
    hipWidth,
  };
}

/** Mean x of the opaque pixels between two rows. */
function upperCentroidX(alpha: Plane, fromY: number, toY: number): number {
  let sum = 0;
  let count = 0;
  for (let y = fromY; y < toY; y++) {
    const row = y * alpha.width;
    for (let x = 0; x < alpha.width; x++) {
      if (alpha.data[row + x] >= 128) {
        sum += x;
        count++;
      }
    }
  }
  return count ? sum / count : alpha.width / 2;
}
