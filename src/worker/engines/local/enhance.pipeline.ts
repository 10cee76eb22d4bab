/**
 * Enhance (the `default` tool):
 * 1. levels: the luma's 0.5th..99.5th percentiles are stretched to the full range (the same curve on R, G and B,
 *    so hues are kept), limited to a 2.5x contrast gain so a nearly flat image is not blown up;
 * 2. midtones: a gamma keeps the stretched median luma at least 0.42 and at most 0.58, so a stretch does not
 *    leave the photo darker (or lighter) than it was overall;
 * 3. a slight saturation boost (x1.12) and a gentle unsharp mask whose radius follows the image size.
 * The text prompt is recorded by the caller and does not change pixels. Output size = input size.
 */
import type { Pipeline } from './pipeline.js';
import { type RawImage, clamp, clampByte, fromRaw, toRawImage } from './raw-image.js';

export const ENHANCE_SATURATION = 1.12;

export const enhancePipeline: Pipeline = async (ctx) => {
  const image = await ctx.image('image');
  ctx.checkpoint();
  const levelled = applyLut(image, levelsLut(image));
  ctx.checkpoint();
  const sigma = clamp(Math.max(image.width, image.height) / 1200, 0.6, 2);
  return toRawImage(
    fromRaw(levelled)
      .modulate({ saturation: ENHANCE_SATURATION })
      .sharpen({ sigma, m1: 0.6, m2: 1.5 }),
  );
};

/** The levels + midtone curve as a 256-entry table. */
export function levelsLut(image: RawImage): Uint8Array {
  const { data, width, height, channels: c } = image;
  const hist = new Uint32Array(256);
  const n = width * height;
  for (let p = 0; p < n * c; p += c) {
    hist[(data[p] * 299 + data[p + 1] * 587 + data[p + 2] * 114 + 500) / 1000 | 0]++;
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
  const gamma = Math.log(targetMedian) / Math.log(stretchedMedian);
  const lut = new Uint8Array(256);
  for (let v = 0; v < 256; v++) {
    const t = clamp((v - lo) / (hi - lo), 0, 1);
    lut[v] = clampByte(255 * t ** gamma);
  }
  return lut;
}

function applyLut(image: RawImage, lut: Uint8Array): RawImage {
  const out = Buffer.alloc(image.data.length);
  for (let i = 0; i < out.length; i++) out[i] = lut[image.data[i]];
  return { ...image, data: out };
}
