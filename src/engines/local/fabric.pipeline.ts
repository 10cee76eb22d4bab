/**
 * Fabric retexture: the target object (a sofa, a cushion, a dress...) is keyed out of its plain background; the
 * fabric swatch is scaled so about four repeats span the object's width and mirror-tiled (so swatch edges meet
 * seamlessly) over the object; inside the object's mask the tiled fabric is multiplied by the target's
 * normalised luminance (luma / mean luma of the object), which keeps the folds, seams and shading; outside the
 * mask the target is unchanged. When the target's background is busy, the whole frame is retextured.
 * Output size = the target image.
 */
import { objectMask, requireCutOut } from './cutout.js';
import type { Pipeline } from './pipeline.js';
import { type RawImage, clamp, clampByte, fromRaw, toRawImage } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { max, round } = Math;

/** Repeats of the swatch across the object's width. */
const FABRIC_REPEATS = 4;

export const fabricRetexturePipeline: Pipeline = async (ctx) => {
  const [fabric, target] = await Promise.all([ctx.image('fabric'), ctx.image('target')]);
  ctx.checkpoint(0.2);
  const mask = await objectMask(target);
  requireCutOut(mask, 'target', 'the object to retexture (a sofa, a cushion, a garment)');
  const { left, top, right, bottom } = mask.box;
  const alpha = mask.alpha.data;

  const tileW = round(clamp((right - left) / FABRIC_REPEATS, 16, 4096));
  const tileH = max(1, round((tileW * fabric.height) / fabric.width));
  const tile = await toRawImage(fromRaw(fabric).resize(tileW, tileH, { fit: 'fill', kernel: 'lanczos3' }));
  ctx.checkpoint(0.5);

  const { data, width, channels: c } = target;
  let sum = 0;
  let count = 0;
  for (let y = top; y < bottom; y++) {
    for (let x = left; x < right; x++) {
      const i = y * width + x;
      if (alpha[i] >= 128) {
        const p = i * c;
        sum += 0.299 * data[p] + 0.587 * data[p + 1] + 0.114 * data[p + 2];
        count++;
      }
    }
  }
  // Luma relative to the object's mean: the shading the fabric is multiplied by.
  const reference = max(16, count ? sum / count : 128);
  const kr = 0.299 / reference;
  const kg = 0.587 / reference;
  const kb = 0.114 / reference;

  // Mirror tiling: column/row lookup tables, origin at the object's top-left corner.
  const mirror = (offset: number, size: number): number => {
    const period = size * 2;
    const m = ((offset % period) + period) % period;
    return m < size ? m : period - 1 - m;
  };
  const columns = new Int32Array(target.width);
  for (let x = 0; x < target.width; x++) columns[x] = mirror(x - left, tileW) * 3;

  const output: RawImage = { ...target, data: Buffer.from(data) };
  const out = output.data;
  const texture = tile.data;
  for (let y = top; y < bottom; y++) {
    const tileRow = mirror(y - top, tileH) * tileW * 3;
    for (let x = left; x < right; x++) {
      const i = y * width + x;
      const a = alpha[i];
      if (a === 0) continue;
      const p = i * c;
      const r = data[p];
      const g = data[p + 1];
      const b = data[p + 2];
      const k = kr * r + kg * g + kb * b;
      const tp = tileRow + columns[x];
      const tr = texture[tp] * k;
      const tg = texture[tp + 1] * k;
      const tb = texture[tp + 2] * k;
      if (a === 255) {
        out[p] = clampByte(tr);
        out[p + 1] = clampByte(tg);
        out[p + 2] = clampByte(tb);
      } else {
        const t = a / 255;
        out[p] = clampByte(r + (tr - r) * t);
        out[p + 1] = clampByte(g + (tg - g) * t);
        out[p + 2] = clampByte(b + (tb - b) * t);
      }
    }
  }
  return output;
};
