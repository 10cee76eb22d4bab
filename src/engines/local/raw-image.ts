import sharp, { type Sharp } from 'sharp';

import { PermanentEngineError } from '../engine.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { round } = Math;

/** Largest input the local engines decode (matches the upload validation: <= 40 megapixels). */
export const MAX_INPUT_PIXELS = 40_000_000;

/** Interleaved 8-bit pixels, row-major, no padding. */
export interface RawImage {
  data: Buffer;
  width: number;
  height: number;
  channels: 3 | 4;
}

/** A single-channel 8-bit plane (alpha, mask, shade), same layout as {@link RawImage} with one channel. */
export interface Plane {
  data: Uint8Array;
  width: number;
  height: number;
}

export interface Rgb {
  r: number;
  g: number;
  b: number;
}

export interface Box {
  left: number;
  top: number;
  /** Exclusive. */
  right: number;
  /** Exclusive. */
  bottom: number;
}

export interface DecodeOptions {
  /**
   * Keep the input's alpha channel, if it has one (RGBA out; opaque inputs stay RGB, cheaper to resample).
   * Otherwise transparent areas are flattened onto white: always RGB out.
   */
  alpha: boolean;
  limitInputPixels?: number;
}

/**
 * Decode one input file to raw sRGB pixels: EXIF orientation applied, 8 bits per channel.
 * Anything sharp cannot read (not an image, truncated, over the pixel limit) is a permanent `invalid_image` failure.
 */
export async function decodeImage(input: Buffer, name: string, options: DecodeOptions): Promise<RawImage> {
  if (!Buffer.isBuffer(input) || input.length === 0) {
    throw new PermanentEngineError('invalid_image', `input image '${name}' is missing or empty`);
  }
  try {
    let pipeline = sharp(input, { limitInputPixels: options.limitInputPixels ?? MAX_INPUT_PIXELS })
      .rotate()
      .toColourspace('srgb');
    if (!options.alpha) {
      pipeline = pipeline.flatten({ background: '#ffffff' });
    }
    const { data, info } = await pipeline.raw({ depth: 'uchar' }).toBuffer({ resolveWithObject: true });
    const channels = info.channels;
    if (channels !== 3 && channels !== 4) {
      throw new Error(`unexpected channel count ${channels}`);
    }
    return { data, width: info.width, height: info.height, channels };
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new PermanentEngineError('invalid_image', `input image '${name}' could not be decoded: ${reason}`);
  }
}

/** A sharp pipeline reading a raw image or plane (no pixel limit needed: it is our own buffer). */
export function fromRaw(image: RawImage | Plane): Sharp {
  const channels = 'channels' in image ? image.channels : 1;
  return sharp(image.data, { raw: { width: image.width, height: image.height, channels } });
}

/** Run a sharp pipeline to a raw image, checking the channel count. */
export async function toRawImage(pipeline: Sharp): Promise<RawImage> {
  const { data, info } = await pipeline.raw({ depth: 'uchar' }).toBuffer({ resolveWithObject: true });
  if (info.channels !== 3 && info.channels !== 4) {
    throw new Error(`unexpected channel count ${info.channels}`);
  }
  return { data, width: info.width, height: info.height, channels: info.channels };
}

/** Run a sharp pipeline to a single-channel plane. */
export async function toPlane(pipeline: Sharp): Promise<Plane> {
  const { data, info } = await pipeline.extractChannel(0).raw({ depth: 'uchar' }).toBuffer({ resolveWithObject: true });
  return { data, width: info.width, height: info.height };
}

/** Gaussian blur of a plane (sharp, native); sigma < 0.3 returns a copy. */
export async function blurPlane(plane: Plane, sigma: number): Promise<Plane> {
  if (sigma < 0.3) {
    return { data: Uint8Array.from(plane.data), width: plane.width, height: plane.height };
  }
  return toPlane(fromRaw(plane).blur(sigma));
}

/** Drop (or keep) to 3 channels: the engine's output format. */
export function toRgb(image: RawImage): RawImage {
  if (image.channels === 3) {
    return image;
  }
  const n = image.width * image.height;
  const out = Buffer.alloc(n * 3);
  for (let i = 0; i < n; i++) {
    out[i * 3] = image.data[i * 4];
    out[i * 3 + 1] = image.data[i * 4 + 1];
    out[i * 3 + 2] = image.data[i * 4 + 2];
  }
  return { data: out, width: image.width, height: image.height, channels: 3 };
}

export function clampByte(value: number): number {
  return value <= 0 ? 0 : value >= 255 ? 255 : round(value);
}

export function clamp(value: number, min: number, max: number): number {
  return value < min ? min : value > max ? max : value;
}

/** Throws the signal's reason (an AbortError by default) when the job was cancelled. */
export function checkAborted(signal: AbortSignal | undefined): void {
  signal?.throwIfAborted();
}
