/**
 * Fabric retexture: the target object (a sofa, a cushion, a dress...) is keyed out of its plain background; the
 * fabric swatch is scaled so about four repeats span the object's width and mirror-tiled (so swatch edges meet
 * seamlessly) over the object; inside the object's mask the tiled fabric is multiplied by the target's
 * normalised luminance (luma / mean luma of the object), which keeps the folds, seams and shading; outside the
 * mask the target is unchanged. When the target's background is busy, the whole frame is retextured.
 * Output size = the target image.
 */
import { keyBackground } from './keying.js';
import type { Pipeline } from './pipeline.js';
import { type RawImage, clamp, clampByte, fromRaw, luma, toRawImage } from './raw-image.js';

/** Repeats of the swatch across the object's width. */
export const FABRIC_REPEATS = 4;

export const fabricRetexturePipeline: Pipeline = async (ctx) => {
  const [fabric, target] = await Promise.all([ctx.image('fabric'), ctx.image('target')]);
  ctx.checkpoint();
  const key = keyBackground(target);
  const { left, top, right, bottom } = key.box;
  const alpha = key.alpha.data;

  const tileW = Math.round(clamp((right - left) / FABRIC_REPEATS, 16, 4096));
  const tileH = Math.max(1, Math.round((tileW * fabric.height) / fabric.width));
  const tile = await toRawImage(fromRaw(fabric).resize(tileW, tileH, { fit: 'fill', kernel: 'lanczos3' }));
  ctx.checkpoint();

  const shade = luma(target);
  let sum = 0;
  let count = 0;
  for (let y = top; y < bottom; y++) {
    for (let x = left; x < right; x++) {
      const i = y * target.width + x;
      if (alpha[i] >= 128) {
        sum += shade.data[i];
        count++;
      }
    }
  }
  const reference = Math.max(16, count ? sum / count : 128);

  // Mirror tiling: column/row lookup tables, origin at the object's top-left corner.
  const mirror = (offset: number, size: number): number => {
    const period = size * 2;
    const m = ((offset % period) + period) % period;
    return m < size ? m : period - 1 - m;
  };
  const columns = new Int32Array(target.width);
  for (let x = 0; x < target.width; x++) columns[x] = mirror(x - left, tileW) * 3;

  const output: RawImage = { ...target, data: Buffer.from(target.data) };
  const c = target.channels;
  for (let y = top; y < bottom; y++) {
    const tileRow = mirror(y - top, tileH) * tileW * 3;
    for (let x = left; x < right; x++) {
      const i = y * target.width + x;
      const a = alpha[i];
      if (a === 0) continue;
      const k = shade.data[i] / reference;
      const tp = tileRow + columns[x];
      const op = i * c;
      const t = a / 255;
      for (let ch = 0; ch < 3; ch++) {
        const textured = tile.data[tp + ch] * k;
        output.data[op + ch] = clampByte(target.data[op + ch] + (textured - target.data[op + ch]) * t);
      }
    }
  }
  return output;
};
