/**
 * Where a garment goes on a person, from what the person models see (person-model.ts): body landmarks from the
 * pose keypoints (widths measured on the person mask), which parts of the person are in front of a garment
 * (head and hair, forearms), and where a garment may be drawn at all (on and just around the person), so the
 * background and the face are left as they were.
 *
 * A photo without a person is `no_person_found`; one of several people, or one that does not show the body parts a
 * garment needs (trousers on a head-and-shoulders portrait), is `unsupported_input`, saying which photo works.
 */
import { PermanentEngineError } from '../engine.js';
import { type Keypoint, type KeypointName, type PersonAnalysis } from './person-model.js';
import { type Plane, blurPlane, clamp, fromRaw, toPlane } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { abs, hypot, max, min, round } = Math;

export interface BodyLandmarks {
  height: number;
  centreX: number;
  /** Top of the shoulders (where a collar sits). */
  shoulderY: number;
  /** Where a waistband sits. */
  waistY: number;
  /** Crotch (where the legs part). */
  hipY: number;
  kneeY: number;
  ankleY: number;
  shoulderWidth: number;
  /** Torso width between chest and waist. */
  torsoWidth: number;
  /** Width across the hips. */
  hipWidth: number;
}

/** From the top down. */
const BODY_PARTS = ['shoulders', 'hips', 'knees', 'ankles'] as const;
export type BodyPart = (typeof BODY_PARTS)[number];

export interface PersonFit {
  body: BodyLandmarks;
  /** Where the person is in front of a garment (head and hair, forearms), 0..255, at the photo's size. */
  front: Plane;
  /** Where a garment may be drawn (the person and a margin around them), 0..255, at the photo's size. */
  within: Plane;
}

/** A keypoint the pose model is at least this sure of counts as seen. */
const SEEN = 0.3;
/** A photo where fewer keypoints are seen holds no person (a cat, a cup, a wall see none or one). */
const MIN_SEEN_FOR_PERSON = 4;
/** Long side of the copy the person mask is widened on. */
const WITHIN_SIZE = 64;

const PART_KEYPOINTS: Record<BodyPart, [KeypointName, KeypointName]> = {
  shoulders: ['leftShoulder', 'rightShoulder'],
  hips: ['leftHip', 'rightHip'],
  knees: ['leftKnee', 'rightKnee'],
  ankles: ['leftAnkle', 'rightAnkle'],
};

/**
 * The body and its masks for a garment that needs `parts` in view. `photoAdvice` completes the refusal's message:
 * it says which photo works (e.g. "a full-length photo, head to feet").
 */
export async function fitPerson(person: PersonAnalysis, parts: BodyPart[], photoAdvice: string): Promise<PersonFit> {
  const { keypoints: k, mask } = person;
  const seen = (name: KeypointName): boolean => k[name].score >= SEEN;
  if (Object.values(k).filter((point) => point.score >= SEEN).length < MIN_SEEN_FOR_PERSON) {
    throw new PermanentEngineError(
      'no_person_found',
      'No person was found in the person image: it needs one person, standing and facing the camera.',
    );
  }
  if (figuresSideBySide(person) > 1) {
    throw new PermanentEngineError(
      'unsupported_input',
      'The person image shows more than one person, and a try-on dresses one person: ' +
        `use a photo of one person alone (${photoAdvice}).`,
    );
  }
  // The shoulders give the body's scale, so they are always needed, both. A part further down is in the frame when
  // one side of it, or of any part below it, is seen (straight trouser legs can hide the knees from the model).
  const needed = [...new Set<BodyPart>(['shoulders', ...parts])];
  const missing = needed.filter((part) => {
    if (part === 'shoulders') return !(seen('leftShoulder') && seen('rightShoulder'));
    return !BODY_PARTS.slice(BODY_PARTS.indexOf(part)).some((below) => PART_KEYPOINTS[below].some(seen));
  });
  if (missing.length > 0) {
    throw new PermanentEngineError(
      'unsupported_input',
      `The person image shows too little of the body for this garment: the ${missing.join(' and ')} ` +
        `are not in view. Use ${photoAdvice}.`,
    );
  }

  const body = landmarks(person);
  const [front, within] = await Promise.all([frontOf(person, body), withinOf(mask, body)]);
  return { body, front, within };
}

/**
 * How many people the person mask shows side by side: the separate stretches of columns where it holds a head,
 * above the shoulders the pose model found, each at least half as wide as those shoulders are apart (an arm raised
 * beside the head is narrower). The pose model follows one person and the mask holds everyone; people standing
 * apart have a gap between their heads.
 */
function figuresSideBySide({ keypoints: k, mask }: PersonAnalysis): number {
  const { width, height, data } = mask;
  const bottom = clamp(round(min(k.leftShoulder.y, k.rightShoulder.y)), 0, height);
  const minWidth = 0.5 * abs(k.leftShoulder.x - k.rightShoulder.x);
  const occupied = new Uint8Array(width);
  for (let y = 0; y < bottom; y++) {
    for (let x = 0, i = y * width; x < width; x++, i++) if (data[i] >= 128) occupied[x] = 1;
  }
  let figures = 0;
  for (let x = 0; x < width;) {
    if (!occupied[x]) {
      x++;
      continue;
    }
    const start = x;
    while (x < width && occupied[x]) x++;
    if (x - start >= minWidth) figures++;
  }
  return figures;
}

function landmarks({ keypoints: k, mask }: PersonAnalysis): BodyLandmarks {
  const mean = (a: Keypoint, b: Keypoint): Keypoint => ({
    x: (a.x + b.x) / 2,
    y: (a.y + b.y) / 2,
    score: min(a.score, b.score),
  });
  // The surer side of a pair, or their mean when both are seen.
  const pair = (a: Keypoint, b: Keypoint): Keypoint | null => {
    if (a.score >= SEEN && b.score >= SEEN) return mean(a, b);
    if (a.score >= SEEN || b.score >= SEEN) return a.score >= b.score ? a : b;
    return null;
  };
  const shoulders = mean(k.leftShoulder, k.rightShoulder);
  const shoulderSpan = max(1, abs(k.leftShoulder.x - k.rightShoulder.x));
  const eyes = pair(k.leftEye, k.rightEye) ?? (k.nose.score >= SEEN ? k.nose : null);
  const eyeY = eyes?.y ?? shoulders.y - 0.9 * shoulderSpan;
  // Typical adult proportions, in shoulder spans, stand in for the parts out of frame.
  const hips = pair(k.leftHip, k.rightHip);
  const hipJointY = hips?.y ?? shoulders.y + 1.45 * shoulderSpan;
  const knees = pair(k.leftKnee, k.rightKnee);
  const ankles = pair(k.leftAnkle, k.rightAnkle);
  const kneeY = knees?.y ?? (ankles ? (hipJointY + ankles.y) / 2 : hipJointY + 1.2 * shoulderSpan);
  const ankleY = ankles?.y ?? kneeY + (kneeY - hipJointY);
  const centreX = hips ? (shoulders.x + hips.x) / 2 : shoulders.x;

  const headTop = maskTop(mask, round(eyes?.x ?? centreX), eyeY) ?? eyeY - 0.45 * (shoulders.y - eyeY);
  const height = max(1, (ankleY - headTop) / 0.955);
  const torso = hipJointY - shoulders.y;
  const maskWidth = (y: number, low: number, high: number, fallback: number): number => {
    const width = runWidth(mask, round(centreX), round(y));
    return width > 0 ? clamp(width, low * shoulderSpan, high * shoulderSpan) : fallback * shoulderSpan;
  };
  return {
    height,
    centreX,
    shoulderY: shoulders.y - 0.035 * height,
    waistY: hipJointY - 0.25 * torso,
    hipY: hipJointY + 0.1 * (kneeY - hipJointY),
    kneeY,
    ankleY,
    shoulderWidth: 1.25 * shoulderSpan,
    torsoWidth: maskWidth(shoulders.y + 0.55 * torso, 0.75, 1.1, 0.9),
    hipWidth: maskWidth(hipJointY - 0.02 * height, 0.7, 1.15, 0.85),
  };
}

/** The top row of the mask's run of person pixels that holds (x, fromY), going up. */
function maskTop(mask: Plane, x: number, fromY: number): number | null {
  const column = clamp(x, 0, mask.width - 1);
  let y = clamp(round(fromY), 0, mask.height - 1);
  if (mask.data[y * mask.width + column] < 128) return null;
  while (y > 0 && mask.data[(y - 1) * mask.width + column] >= 128) y--;
  return y;
}

/** Width of the mask's run of person pixels through (x, y); 0 when (x, y) is not on the person. */
function runWidth(mask: Plane, x: number, y: number): number {
  if (y < 0 || y >= mask.height || x < 0 || x >= mask.width) return 0;
  const row = y * mask.width;
  if (mask.data[row + x] < 128) return 0;
  let left = x;
  let right = x;
  while (left > 0 && mask.data[row + left - 1] >= 128) left--;
  while (right < mask.width - 1 && mask.data[row + right + 1] >= 128) right++;
  return right - left + 1;
}

/** Head and hair (the person above the chin) and the forearms, soft-edged. */
async function frontOf({ keypoints: k, mask }: PersonAnalysis, body: BodyLandmarks): Promise<Plane> {
  const { width, height } = mask;
  const front = new Uint8Array(width * height);
  const shoulderJointY = (k.leftShoulder.y + k.rightShoulder.y) / 2;
  const eyes = [k.leftEye, k.rightEye, k.nose].filter((point) => point.score >= SEEN);
  if (eyes.length > 0) {
    const eyeY = eyes.reduce((sum, point) => sum + point.y, 0) / eyes.length;
    const headX = eyes.reduce((sum, point) => sum + point.x, 0) / eyes.length;
    const neck = shoulderJointY - eyeY;
    const chinY = min(height, round(eyeY + 0.6 * neck));
    const x0 = max(0, round(headX - 1.1 * neck));
    const x1 = min(width, round(headX + 1.1 * neck));
    for (let y = 0; y < chinY; y++) {
      for (let x = x0; x < x1; x++) if (mask.data[y * width + x] >= 128) front[y * width + x] = 255;
    }
  }
  const radius = 0.12 * body.shoulderWidth;
  for (const [elbow, wrist] of [
    [k.leftElbow, k.leftWrist],
    [k.rightElbow, k.rightWrist],
  ]) {
    if (elbow.score >= SEEN && wrist.score >= SEEN) drawCapsule(front, mask, elbow, wrist, radius);
  }
  return blurPlane({ data: front, width, height }, max(0.5, body.height * 0.002));
}

/** Marks the person pixels within `radius` of the segment a-b. */
function drawCapsule(front: Uint8Array, mask: Plane, a: Keypoint, b: Keypoint, radius: number): void {
  const { width, height } = mask;
  const x0 = max(0, round(min(a.x, b.x) - radius));
  const x1 = min(width, round(max(a.x, b.x) + radius));
  const y0 = max(0, round(min(a.y, b.y) - radius));
  const y1 = min(height, round(max(a.y, b.y) + radius));
  const dx = b.x - a.x;
  const dy = b.y - a.y;
  const length2 = max(1e-6, dx * dx + dy * dy);
  for (let y = y0; y < y1; y++) {
    for (let x = x0; x < x1; x++) {
      const t = clamp(((x - a.x) * dx + (y - a.y) * dy) / length2, 0, 1);
      if (hypot(x - a.x - t * dx, y - a.y - t * dy) <= radius && mask.data[y * width + x] >= 128) {
        front[y * width + x] = 255;
      }
    }
  }
}

/**
 * The person mask widened by an eighth of the figure's height: clothes stand off the body (a flared skirt, a loose
 * sleeve), but a garment is never drawn over the background away from the person. Widened on a small copy.
 */
async function withinOf(mask: Plane, body: BodyLandmarks): Promise<Plane> {
  const scale = min(1, WITHIN_SIZE / max(mask.width, mask.height));
  const radius = max(1, round(body.height * 0.125 * scale));
  return toPlane(
    fromRaw(mask)
      .resize(max(1, round(mask.width * scale)), max(1, round(mask.height * scale)), { fit: 'fill' })
      .threshold(128)
      // sharp's morphology takes black as the foreground: its erode is what grows the (white) person.
      .erode(radius)
      // Blurred small, the edge is soft once enlarged (a few percent of the height), at no full-size cost.
      .blur(1)
      .resize(mask.width, mask.height, { fit: 'fill' }),
  );
}
