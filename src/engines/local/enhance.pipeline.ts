/**
 * Enhance (the `default` tool):
 * 1. levels: the luma's 0.5th..99.5th percentiles are stretched to the full range (the same curve on R, G and B,
 *    so hues are kept), limited to a 2.5x contrast gain so a nearly flat image is not blown up;
 * 2. midtones: a gamma keeps the stretched median luma at least 0.42 and at most 0.58, so a stretch does not
 *    leave the photo darker (or lighter) than it was overall;
 * 3. a slight saturation boost (x1.12) and a gentle unsharp mask on luma whose radius follows the image size
 *    (flat areas untouched, each pixel changed by at most 24 levels, so no halos).
 * All in JS on raw buffers with one native blur: sharp's modulate/sharpen would each convert the image to LAB.
 * The text prompt is recorded by the caller and does not change pixels. Output size = input size.
 */
import type { Pipeline } from './pipeline.js';
import { type RawImage, blurPlane, clamp, clampByte } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { log, max } = Math;

const ENHANCE_SATURATION = 1.12;
/** Unsharp mask strength on luma, and the largest change it may make to a pixel. */
const ENHANCE_SHARPEN = { amount: 0.7, limit: 24 };

export const enhancePipeline: Pipeline = async (ctx) => {
  const image = await ctx.image('image');
  ctx.checkpoint(0.2);
  const lut = levelsLut(image);
  const n = image.width * image.height;
  const c = image.channels;
  const out = Buffer.alloc(n * 3);
  const lumaPlane = new Uint8Array(n);
  // Levels + saturation (colour pushed away from its luma) in one pass.
  for (let i = 0, p = 0; i < n; i++, p += c) {
    const r = lut[image.data[p]];
    const g = lut[image.data[p + 1]];
    const b = lut[image.data[p + 2]];
    const l = 0.299 * r + 0.587 * g + 0.114 * b;
    out[i * 3] = clampByte(l + (r - l) * ENHANCE_SATURATION);
    out[i * 3 + 1] = clampByte(l + (g - l) * ENHANCE_SATURATION);
    out[i * 3 + 2] = clampByte(l + (b - l) * ENHANCE_SATURATION);
    lumaPlane[i] = clampByte(l);
  }
  ctx.checkpoint(0.6);
  // Unsharp mask on luma: add the (limited) difference between the luma and its blur to every channel.
  const sigma = clamp(max(image.width, image.height) / 1000, 0.8, 2.5);
  const blurred = await blurPlane({ data: lumaPlane, width: image.width, height: image.height }, sigma);
  const { amount, limit } = ENHANCE_SHARPEN;
  for (let i = 0; i < n; i++) {
    const detail = lumaPlane[i] - blurred.data[i];
    if (detail > -2 && detail < 2) continue; // leave flat areas (and noise) alone
    const d = clamp(detail * amount, -limit, limit);
    out[i * 3] = clampByte(out[i * 3] + d);
    out[i * 3 + 1] = clampByte(out[i * 3 + 1] + d);
    out[i * 3 + 2] = clampByte(out[i * 3 + 2] + d);
  }
  return { data: out, width: image.width, height: image.height, channels: 3 };
};

/** The levels + midtone curve as a 256-entry table. */
function levelsLut(image: RawImage): Uint8Array {
  const { data, width, height, channels: c } = image;
  const hist = new Uint32Array(256);
  const n = width * height;
  for (let p = 0; p < n * c; p += c) {
    hist[((data[p] * 299 + data[p + 1] * 587 + data[p + 2] * 114 + 500) / 1000) | 0]++;
  }
  const percentile = (q: number): number => {
    let acc = 0;
    for (let v = 0; v < 256; v++) {
      acc += hist[v];
      if (acc >= n * q) return v;
    }
    return 255;
  };
  let lo = percentile(0.005);
  let hi = percentile(0.995);
  const median = percentile(0.5);
  // At most 2.5x contrast: widen the window around its centre when it is narrower than 255 / 2.5.
  const minSpan = 255 / 2.5;
  if (hi - lo < minSpan) {
    const centre = (hi + lo) / 2;
    lo = clamp(centre - minSpan / 2, 0, 255 - minSpan);
    hi = lo + minSpan;
  }
  const stretchedMedian = clamp((median - lo) / (hi - lo), 0.02, 0.98);
  const targetMedian = clamp(stretchedMedian, 0.42, 0.58);
  const gamma = log(targetMedian) / log(stretchedMedian);
  const lut = new Uint8Array(256);
  for (let v = 0; v < 256; v++) {
    const t = clamp((v - lo) / (hi - lo), 0, 1);
    lut[v] = clampByte(255 * t ** gamma);
  }
  return lut;
}
