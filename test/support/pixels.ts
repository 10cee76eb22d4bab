/** Pixel comparisons for the engines' tests: what changed where between an input and an output. */
import sharp from 'sharp';

import type { EngineImage, EngineResult } from '../../src/engines/index.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { abs } = Math;

export interface Raw {
  data: Buffer;
  width: number;
  height: number;
  channels: number;
}

/** An encoded image as the engines see it (orientation applied, sRGB, flattened on white). */
export async function decode(input: Buffer): Promise<Raw> {
  const { data, info } = await sharp(input)
    .rotate()
    .toColourspace('srgb')
    .flatten({ background: '#ffffff' })
    .raw()
    .toBuffer({ resolveWithObject: true });
  return { data, width: info.width, height: info.height, channels: info.channels };
}

/** The one image of a run that was to make one. */
export function onlyImage(result: EngineResult): EngineImage {
  const images = Array.isArray(result) ? (result as readonly EngineImage[]) : [result as EngineImage];
  if (images.length !== 1) throw new Error(`expected one image, got ${images.length}`);
  return images[0];
}

export function raw(image: EngineImage): Raw {
  if (image.kind !== 'raw') throw new Error('expected raw pixels');
  return image;
}

export interface Region {
  left: number;
  top: number;
  width: number;
  height: number;
}

/** Mean absolute per-channel difference of two same-sized images over a region. */
export function meanDiff(a: Raw, b: Raw, r: Region): number {
  let sum = 0;
  let count = 0;
  for (let y = r.top; y < r.top + r.height; y++) {
    for (let x = r.left; x < r.left + r.width; x++) {
      for (let c = 0; c < 3; c++) {
        sum += abs(a.data[(y * a.width + x) * a.channels + c] - b.data[(y * b.width + x) * b.channels + c]);
        count++;
      }
    }
  }
  return sum / count;
}

export function meanColour(a: Raw, r: Region): [number, number, number] {
  const sum = [0, 0, 0];
  for (let y = r.top; y < r.top + r.height; y++) {
    for (let x = r.left; x < r.left + r.width; x++) {
      for (let c = 0; c < 3; c++) sum[c] += a.data[(y * a.width + x) * a.channels + c];
    }
  }
  const n = r.width * r.height;
  return [sum[0] / n, sum[1] / n, sum[2] / n];
}
