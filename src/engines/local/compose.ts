/** Compositing helpers on raw buffers (no encode/decode between steps). Every function mutates `base` in place. */
import { type Plane, type RawImage, clamp, clampByte } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { ceil, exp, floor, max, min, round, sqrt } = Math;

/** Alpha-composite an RGBA overlay onto an RGB(A) base at (left, top); parts outside the base are clipped. */
export function compositeOver(base: RawImage, overlay: RawImage, left: number, top: number, opacity = 1): void {
  const bc = base.channels;
  const oc = overlay.channels;
  const x0 = max(0, left);
  const y0 = max(0, top);
  const x1 = min(base.width, left + overlay.width);
  const y1 = min(base.height, top + overlay.height);
  for (let y = y0; y < y1; y++) {
    const oy = y - top;
    for (let x = x0; x < x1; x++) {
      const op = (oy * overlay.width + (x - left)) * oc;
      const coverage = oc === 4 ? overlay.data[op + 3] : 255;
      // A cut-out is mostly fully transparent or fully opaque: those pixels need no arithmetic.
      if (coverage === 0) continue;
      const a = (coverage / 255) * opacity;
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
  const x0 = max(0, left);
  const y0 = max(0, top);
  const x1 = min(base.width, left + shade.width);
  const y1 = min(base.height, top + shade.height);
  // Every (shade, byte) pair's result, computed once: a shadow covers up to a million pixels.
  const shaded = new Uint8Array(256 * 256);
  for (let s = 0; s < 256; s++) {
    const k = 1 - (strength * s) / 255;
    for (let value = 0; value < 256; value++) shaded[(s << 8) | value] = clampByte(value * k);
  }
  for (let y = y0; y < y1; y++) {
    const sy = y - top;
    for (let x = x0; x < x1; x++) {
      const s = shade.data[sy * shade.width + (x - left)];
      if (s === 0) continue;
      const row = s << 8;
      const bp = (y * base.width + x) * bc;
      base.data[bp] = shaded[row | base.data[bp]];
      base.data[bp + 1] = shaded[row | base.data[bp + 1]];
      base.data[bp + 2] = shaded[row | base.data[bp + 2]];
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
 * A soft shadow of an alpha silhouette drawn at drawnWidth x drawnHeight (its own size unless given): the
 * silhouette padded by `pad` pixels on every side and Gaussian-blurred (approximated by three box blurs, on a
 * copy reduced by up to 8x for wide blurs, then scaled back bilinearly). A silhouette smaller than it is drawn
 * gives the same shadow, as the blur is far wider than its pixels. Pure JS, no sharp round trips. Place it at
 * (overlayLeft - pad + dx, overlayTop - pad + dy).
 */
export function softShadow(
  alpha: Plane,
  sigma: number,
  pad: number,
  drawnWidth = alpha.width,
  drawnHeight = alpha.height,
): Plane {
  const width = drawnWidth + pad * 2;
  const height = drawnHeight + pad * 2;
  const sx = drawnWidth / alpha.width;
  const sy = drawnHeight / alpha.height;
  const factor = clamp(floor(sigma / 1.5), 1, 8);
  const sw = ceil(width / factor);
  const sh = ceil(height / factor);
  const small = new Float32Array(sw * sh);
  for (let y = 0; y < alpha.height; y++) {
    const row = (min(sh - 1, ((y * sy + pad) / factor) | 0) * sw) | 0;
    for (let x = 0; x < alpha.width; x++) {
      small[row + min(sw - 1, ((x * sx + pad) / factor) | 0)] += alpha.data[y * alpha.width + x];
    }
  }
  // Each silhouette pixel stands for sx * sy drawn pixels.
  const norm = (sx * sy) / (factor * factor);
  for (let i = 0; i < small.length; i++) small[i] *= norm;
  const s = sigma / factor;
  const radius = max(0, round((sqrt(4 * s * s + 1) - 1) / 2));
  if (radius > 0) {
    const tmp = new Float32Array(max(sw, sh));
    for (let pass = 0; pass < 3; pass++) {
      boxBlur(small, sw, sh, 1, sw, radius, tmp); // rows
      boxBlur(small, sh, sw, sw, 1, radius, tmp); // columns
    }
  }
  if (factor === 1) {
    const out = new Uint8Array(width * height);
    for (let i = 0; i < out.length; i++) out[i] = clampByte(small[i]);
    return { data: out, width, height };
  }
  return { data: upsample(small, sw, sh, width, height, factor), width, height };
}

/** In-place box blur of `lines` lines of `length` samples (`step` apart; lines `lineStep` apart), zero outside. */
function boxBlur(
  data: Float32Array,
  lines: number,
  length: number,
  step: number,
  lineStep: number,
  radius: number,
  tmp: Float32Array,
): void {
  const norm = 1 / (radius * 2 + 1);
  for (let line = 0; line < lines; line++) {
    const base = line * lineStep;
    for (let k = 0; k < length; k++) tmp[k] = data[base + k * step];
    let sum = 0;
    for (let k = 0; k < min(radius, length); k++) sum += tmp[k];
    for (let k = 0; k < length; k++) {
      if (k + radius < length) sum += tmp[k + radius];
      if (k - radius - 1 >= 0) sum -= tmp[k - radius - 1];
      data[base + k * step] = sum * norm;
    }
  }
}

/** Bilinear upsampling of a reduced plane back to width x height. */
function upsample(
  small: Float32Array,
  sw: number,
  sh: number,
  width: number,
  height: number,
  factor: number,
): Uint8Array {
  const out = new Uint8Array(width * height);
  // Each column's two source samples and weight, the same for every row.
  const x0s = new Int32Array(width);
  const x1s = new Int32Array(width);
  const fxs = new Float32Array(width);
  for (let x = 0; x < width; x++) {
    const sx = clamp((x + 0.5) / factor - 0.5, 0, sw - 1);
    const x0 = min(sw - 2, floor(sx));
    fxs[x] = sx - x0;
    x0s[x] = max(0, x0);
    x1s[x] = min(sw - 1, x0s[x] + 1);
  }
  // The rows between two source rows share their horizontal interpolations: computed once per source row pair.
  const tops = new Float64Array(width);
  const bottoms = new Float64Array(width);
  let cachedY0 = -1;
  for (let y = 0; y < height; y++) {
    const sy = clamp((y + 0.5) / factor - 0.5, 0, sh - 1);
    const y0 = max(0, min(sh - 2, floor(sy)));
    const fy = sy - y0;
    if (y0 !== cachedY0) {
      const r0 = y0 * sw;
      const r1 = min(sh - 1, y0 + 1) * sw;
      for (let x = 0; x < width; x++) {
        const x0 = x0s[x];
        const x1 = x1s[x];
        const fx = fxs[x];
        tops[x] = small[r0 + x0] + (small[r0 + x1] - small[r0 + x0]) * fx;
        bottoms[x] = small[r1 + x0] + (small[r1 + x1] - small[r1 + x0]) * fx;
      }
      cachedY0 = y0;
    }
    const row = y * width;
    for (let x = 0; x < width; x++) out[row + x] = clampByte(tops[x] + (bottoms[x] - tops[x]) * fy);
  }
  return out;
}

/**
 * A soft elliptical shade (Gaussian fall-off) centred in its own plane: rx, ry are the 1-sigma radii; the plane
 * extends 3 sigma. Place it at (cx - plane.width / 2, cy - plane.height / 2).
 */
export function ellipseShade(rx: number, ry: number): Plane {
  const hw = max(1, ceil(rx * 3));
  const hh = max(1, ceil(ry * 3));
  const width = hw * 2;
  const height = hh * 2;
  const out = new Uint8Array(width * height);
  for (let y = 0; y < height; y++) {
    const dy = (y + 0.5 - hh) / ry;
    for (let x = 0; x < width; x++) {
      const dx = (x + 0.5 - hw) / rx;
      out[y * width + x] = clampByte(255 * exp(-0.5 * (dx * dx + dy * dy)));
    }
  }
  return { data: out, width, height };
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
      const r = sqrt(dx * dx + dy * dy) * 2; // 0 centre .. 1 at the edge midpoints
      const a = clamp((1 - r) / 0.25, 0, 1);
      out[(y * width + x) * 4 + 3] = clampByte(a * 255);
    }
  }
  return { ...image, data: out };
}
