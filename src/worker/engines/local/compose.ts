/** Compositing helpers on raw buffers (no encode/decode between steps). Every function mutates `base` in place. */
import { type Plane, type RawImage, blurPlane, clamp, clampByte } from './raw-image.js';

/** Alpha-composite an RGBA overlay onto an RGB(A) base at (left, top); parts outside the base are clipped. */
export function compositeOver(base: RawImage, overlay: RawImage, left: number, top: number, opacity = 1): void {
  const bc = base.channels;
  const oc = overlay.channels;
  const x0 = Math.max(0, left);
  const y0 = Math.max(0, top);
  const x1 = Math.min(base.width, left + overlay.width);
  const y1 = Math.min(base.height, top + overlay.height);
  for (let y = y0; y < y1; y++) {
    const oy = y - top;
    for (let x = x0; x < x1; x++) {
      const op = (oy * overlay.width + (x - left)) * oc;
      const a = ((oc === 4 ? overlay.data[op + 3] : 255) / 255) * opacity;
      if (a <= 0) continue;
      const bp = (y * base.width + x) * bc;
      if (a >= 1) {
        base.data[bp] = overlay.data[op];
        base.data[bp + 1] = overlay.data[op + 1];
        base.data[bp + 2] = overlay.data[op + 2];
      } else {
        base.data[bp] = clampByte(base.data[bp] + (overlay.data[op] - base.data[bp]) * a);
        base.data[bp + 1] = clampByte(base.data[bp + 1] + (overlay.data[op + 1] - base.data[bp + 1]) * a);
        base.data[bp + 2] = clampByte(base.data[bp + 2] + (overlay.data[op + 2] - base.data[bp + 2]) * a);
      }
    }
  }
}

/** Darken the base by a shade plane placed at (left, top): base *= 1 - strength * shade / 255. */
export function applyShade(base: RawImage, shade: Plane, left: number, top: number, strength: number): void {
  const bc = base.channels;
  const x0 = Math.max(0, left);
  const y0 = Math.max(0, top);
  const x1 = Math.min(base.width, left + shade.width);
  const y1 = Math.min(base.height, top + shade.height);
  for (let y = y0; y < y1; y++) {
    const sy = y - top;
    for (let x = x0; x < x1; x++) {
      const s = shade.data[sy * shade.width + (x - left)];
      if (s === 0) continue;
      const k = 1 - (strength * s) / 255;
      const bp = (y * base.width + x) * bc;
      base.data[bp] = clampByte(base.data[bp] * k);
      base.data[bp + 1] = clampByte(base.data[bp + 1] * k);
      base.data[bp + 2] = clampByte(base.data[bp + 2] * k);
    }
  }
}

/** The alpha channel of an RGBA image as a plane. */
export function alphaOf(image: RawImage): Plane {
  const n = image.width * image.height;
  const out = new Uint8Array(n);
  if (image.channels === 4) {
    for (let i = 0; i < n; i++) out[i] = image.data[i * 4 + 3];
  } else {
    out.fill(255);
  }
  return { data: out, width: image.width, height: image.height };
}

/**
 * A soft shadow of an alpha silhouette: the silhouette padded by `pad` pixels on every side and blurred.
 * Place it at (overlayLeft - pad + dx, overlayTop - pad + dy).
 */
export async function softShadow(alpha: Plane, sigma: number, pad: number): Promise<Plane> {
  const width = alpha.width + pad * 2;
  const height = alpha.height + pad * 2;
  const padded = new Uint8Array(width * height);
  for (let y = 0; y < alpha.height; y++) {
    padded.set(alpha.data.subarray(y * alpha.width, (y + 1) * alpha.width), (y + pad) * width + pad);
  }
  return blurPlane({ data: padded, width, height }, sigma);
}

/**
 * A soft elliptical shade (Gaussian fall-off) centred in its own plane: rx, ry are the 1-sigma radii; the plane
 * extends 3 sigma. Place it at (cx - plane.width / 2, cy - plane.height / 2).
 */
export function ellipseShade(rx: number, ry: number): Plane {
  const hw = Math.max(1, Math.ceil(rx * 3));
  const hh = Math.max(1, Math.ceil(ry * 3));
  const width = hw * 2;
  const height = hh * 2;
  const out = new Uint8Array(width * height);
  for (let y = 0; y < height; y++) {
    const dy = (y + 0.5 - hh) / ry;
    for (let x = 0; x < width; x++) {
      const dx = (x + 0.5 - hw) / rx;
      out[y * width + x] = clampByte(255 * Math.exp(-0.5 * (dx * dx + dy * dy)));
    }
  }
  return { data: out, width, height };
}

/** Pixel-wise maximum of two equally sized planes. */
export function maxPlane(a: Plane, b: Plane): Plane {
  const out = new Uint8Array(a.data.length);
  for (let i = 0; i < out.length; i++) out[i] = a.data[i] > b.data[i] ? a.data[i] : b.data[i];
  return { data: out, width: a.width, height: a.height };
}

/**
 * Fallback cut-out when a photo's background is busy: the whole RGBA photo with an elliptical soft edge, so it
 * does not read as a pasted rectangle.
 */
export function featherEllipse(image: RawImage): RawImage {
  const { width, height } = image;
  const out = Buffer.from(image.data);
  for (let y = 0; y < height; y++) {
    const dy = (y + 0.5) / height - 0.5;
    for (let x = 0; x < width; x++) {
      const dx = (x + 0.5) / width - 0.5;
      const r = Math.sqrt(dx * dx + dy * dy) * 2; // 0 centre .. 1 at the edge midpoints
      const a = clamp((1 - r) / 0.25, 0, 1);
      out[(y * width + x) * 4 + 3] = clampByte(a * 255);
    }
  }
  return { ...image, data: out };
}
