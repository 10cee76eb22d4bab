/**
 * Cutting an object out of its plain background at the size it will be drawn.
 *
 * The object is first found on a copy at most 512 px long (cheap: its box and silhouette, enough to decide how
 * large it is drawn). Then only the box (plus a margin of background) is resampled from the full-resolution
 * input straight to the drawing size and keyed again there, so edges are keyed at the output resolution
 * and no RGBA resample is needed after keying.
 */
import { PermanentEngineError } from '../engine.js';
import { featherEllipse } from './compose.js';
import { type KeyOptions, type KeyProblem, type KeyResult, extractForeground, keyBackground } from './keying.js';
import { type Box, type Plane, type RawImage, fromRaw, toPlane, toRawImage } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { ceil, floor, max, min, round } = Math;

const ANALYSIS_SIZE = 512;

export interface ObjectAnalysis {
  /** The object's bounding box in the input image's pixels (the whole image when not reliable). */
  box: Box;
  /** The object's alpha on the analysis copy, cropped to the object's box there. */
  silhouette: Plane;
  /** False when the background was not plain: the object is then the whole image. */
  reliable: boolean;
  /** Why the object could not be cut out. */
  problem?: KeyProblem;
  /** The keying of the whole input at its own size, when the analysis copy was the input itself. */
  fullKey?: KeyResult;
  /** The keying options, used again by {@link cutoutAt}. */
  options: KeyOptions;
}

export interface Cutout {
  /** RGBA: the object keyed out, on a transparent margin. */
  image: RawImage;
  /** Where the object's box (as drawn, width x height) starts inside `image`. */
  left: number;
  top: number;
}

/** Find the object on a small copy of `image`. */
export async function analyseObject(image: RawImage, options: KeyOptions = {}): Promise<ObjectAnalysis> {
  const scale = min(1, ANALYSIS_SIZE / max(image.width, image.height));
  const small =
    scale < 1
      ? await toRawImage(
          fromRaw(image).resize(max(1, round(image.width * scale)), max(1, round(image.height * scale)), {
            fit: 'fill',
          }),
        )
      : image;
  const key = keyBackground(small, options);
  const sx = image.width / small.width;
  const sy = image.height / small.height;
  const box = key.reliable
    ? {
        left: max(0, floor(key.box.left * sx)),
        top: max(0, floor(key.box.top * sy)),
        right: min(image.width, ceil(key.box.right * sx)),
        bottom: min(image.height, ceil(key.box.bottom * sy)),
      }
    : { left: 0, top: 0, right: image.width, bottom: image.height };
  return {
    box,
    silhouette: cropPlane(key.alpha, key.box),
    reliable: key.reliable,
    problem: key.problem,
    fullKey: small === image ? key : undefined,
    options,
  };
}

/** The analysed object cut out with its box drawn at exactly width x height. */
export async function cutoutAt(
  image: RawImage,
  analysis: ObjectAnalysis,
  width: number,
  height: number,
): Promise<Cutout> {
  const { box, options } = analysis;
  const boxW = box.right - box.left;
  const boxH = box.bottom - box.top;
  const sx = width / boxW;
  const sy = height / boxH;
  if (!analysis.reliable) {
    const whole = await toRawImage(fromRaw(image).ensureAlpha().resize(width, height, { fit: 'fill' }));
    return { image: featherEllipse(whole), left: 0, top: 0 };
  }
  // A margin of background around the box, so the border colour can be estimated again.
  const margin = max(4, round(max(boxW, boxH) * 0.03));
  const region = {
    left: max(0, box.left - margin),
    top: max(0, box.top - margin),
    right: min(image.width, box.right + margin),
    bottom: min(image.height, box.bottom + margin),
  };
  const regionW = region.right - region.left;
  const regionH = region.bottom - region.top;
  const outW = max(1, round(regionW * sx));
  const outH = max(1, round(regionH * sy));
  const left = round((box.left - region.left) * sx);
  const top = round((box.top - region.top) * sy);
  const extract = fromRaw(image).extract({ left: region.left, top: region.top, width: regionW, height: regionH });
  if (outW > regionW && outH > regionH) {
    // Drawn larger than the input has pixels: keying an enlarged copy would find no edge the input lacks, and
    // keying costs per pixel. Keyed at the input's size (the analysis did that already for an input no larger
    // than its copy), the cut-out is enlarged (alpha premultiplied).
    const cut = analysis.fullKey?.reliable
      ? { image: extractForeground(image, analysis.fullKey, region), reliable: true }
      : keyed(await toRawImage(extract), options);
    const enlarged = await toRawImage(fromRaw(cut.image).resize(outW, outH, { fit: 'fill' }));
    return { image: cut.reliable ? enlarged : featherEllipse(enlarged), left, top };
  }
  const cut = keyed(await toRawImage(extract.resize(outW, outH, { fit: 'fill' })), options);
  return { image: cut.reliable ? cut.image : featherEllipse(cut.image), left, top };
}

/** The whole of `image` with its background keyed out (opaque when the background is not plain). */
function keyed(image: RawImage, options: KeyOptions): { image: RawImage; reliable: boolean } {
  const key: KeyResult = keyBackground(image, options);
  return {
    image: extractForeground(image, key, { left: 0, top: 0, right: image.width, bottom: image.height }),
    reliable: key.reliable,
  };
}

/**
 * Refuses an object the engine could not cut out (anything drawn with it would be the whole photo), naming the
 * cause the keying found. `what` says what the input should show, for the client.
 */
export function requireCutOut(found: { reliable: boolean; problem?: KeyProblem }, input: string, what: string): void {
  if (found.reliable) return;
  const needs = `The ${input} image needs ${what} on a plain, evenly coloured background`;
  const causes: Record<KeyProblem, string> = {
    busy_background: `${needs}; in this one the background is too busy to tell the ${input} from it.`,
    fills_frame:
      `${needs}, with that background showing along at least two edges of the image; in this one the ${input} ` +
      `fills the frame, running off three or four of its edges, so there is too little background to tell it from.`,
    nothing_found: `${needs}; in this one nothing stands out from the background.`,
  };
  throw new PermanentEngineError('unsupported_input', causes[found.problem ?? 'busy_background']);
}

/** Longest side keyed directly by {@link objectMask}; larger images are keyed on a reduced copy. */
const MASK_KEY_SIZE = 2048;

/**
 * The object's alpha over the whole image (for retexturing in place). Images longer than 2048 px are keyed on a
 * reduced copy and the alpha scaled back up (bounded memory and time for 40 MP inputs).
 */
export async function objectMask(
  image: RawImage,
  options: KeyOptions = {},
): Promise<{ alpha: Plane; box: Box; reliable: boolean; problem?: KeyProblem }> {
  const scale = min(1, MASK_KEY_SIZE / max(image.width, image.height));
  if (scale === 1) {
    const key = keyBackground(image, options);
    return { alpha: key.alpha, box: key.box, reliable: key.reliable, problem: key.problem };
  }
  const small = await toRawImage(
    fromRaw(image).resize(max(1, round(image.width * scale)), max(1, round(image.height * scale)), { fit: 'fill' }),
  );
  const key = keyBackground(small, options);
  const alpha = await toPlane(fromRaw(key.alpha).resize(image.width, image.height, { fit: 'fill', kernel: 'linear' }));
  const sx = image.width / small.width;
  const sy = image.height / small.height;
  const box = {
    left: max(0, floor(key.box.left * sx) - 1),
    top: max(0, floor(key.box.top * sy) - 1),
    right: min(image.width, ceil(key.box.right * sx) + 1),
    bottom: min(image.height, ceil(key.box.bottom * sy) + 1),
  };
  return { alpha, box, reliable: key.reliable, problem: key.problem };
}

/** Copy of a plane's region. */
function cropPlane(plane: Plane, box: Box): Plane {
  const width = max(1, box.right - box.left);
  const height = max(1, box.bottom - box.top);
  const out = new Uint8Array(width * height);
  for (let y = 0; y < height; y++) {
    const src = (box.top + y) * plane.width + box.left;
    out.set(plane.data.subarray(src, src + width), y * width);
  }
  return { data: out, width, height };
}
