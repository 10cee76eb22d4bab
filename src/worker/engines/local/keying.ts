/**
 * Background keying shared by every local pipeline: the background colour is estimated from the image
 * border, the background is the border-connected region close to that colour, and alpha gets a soft edge
 * from the colour distance. The largest connected foreground (optionally: every part at least a fraction
 * of it) is kept, so specks, dust and a separate price tag drop out while enclosed areas that happen to be
 * background-coloured (a white print on a white shirt) stay opaque.
 */
import { type Box, type Plane, type RawImage, type Rgb, clamp, clampByte } from './raw-image.js';

export interface KeyOptions {
  /** Keep every connected foreground part of at least this fraction of the largest one (1 = the largest only). */
  keepRatio?: number;
  /** Border colour spread (90th percentile distance) above which the background is not "plain". Default 48. */
  maxBorderNoise?: number;
}

export interface KeyResult {
  /** Foreground alpha for every pixel of the source image (0 = background). */
  alpha: Plane;
  /** The estimated background colour. */
  background: Rgb;
  /**
   * False when the border is not a plain colour (a busy background) or the foreground found is implausible
   * (almost nothing / almost everything). The alpha is then fully opaque and `box` the whole image.
   */
  reliable: boolean;
  /** Bounding box of the foreground (alpha >= 16); the whole image when unreliable. */
  box: Box;
  /** Fraction of the image covered by the opaque foreground. */
  coverage: number;
  /** True when the alpha came from the input's own transparency rather than from colour keying. */
  fromInputAlpha: boolean;
}

interface BorderStats {
  colour: Rgb;
  /** 90th percentile of the border pixels' distance to `colour`. */
  noise: number;
  /** Median alpha of the border (255 for RGB images). */
  alpha: number;
}

const MAX_DIST = 512; // histogram bound for distance() values

/** Background colour (per-channel median) and spread of the pixels in a thin band along the image border. */
export function estimateBorder(image: RawImage): BorderStats {
  const { data, width, height, channels: c } = image;
  const band = Math.max(1, Math.round(Math.min(width, height) * 0.01));
  const hist = [new Uint32Array(256), new Uint32Array(256), new Uint32Array(256), new Uint32Array(256)];
  const indices: number[] = [];
  const visit = (x: number, y: number): void => {
    const p = (y * width + x) * c;
    indices.push(p);
    hist[0][data[p]]++;
    hist[1][data[p + 1]]++;
    hist[2][data[p + 2]]++;
    hist[3][c === 4 ? data[p + 3] : 255]++;
  };
  for (let y = 0; y < height; y++) {
    if (y < band || y >= height - band) {
      for (let x = 0; x < width; x++) visit(x, y);
    } else {
      for (let x = 0; x < band; x++) visit(x, y);
      for (let x = width - band; x < width; x++) visit(x, y);
    }
  }
  const median = (h: Uint32Array): number => {
    const half = indices.length / 2;
    let acc = 0;
    for (let v = 0; v < 256; v++) {
      acc += h[v];
      if (acc >= half) return v;
    }
    return 255;
  };
  const colour = { r: median(hist[0]), g: median(hist[1]), b: median(hist[2]) };
  const distHist = new Uint32Array(MAX_DIST + 1);
  for (const p of indices) {
    distHist[Math.min(MAX_DIST, Math.round(distance(data[p], data[p + 1], data[p + 2], colour)))]++;
  }
  let acc = 0;
  let noise = MAX_DIST;
  for (let d = 0; d <= MAX_DIST; d++) {
    acc += distHist[d];
    if (acc >= indices.length * 0.9) {
      noise = d;
      break;
    }
  }
  return { colour, noise, alpha: median(hist[3]) };
}

/**
 * Colour distance to the background, split into a luma difference and a chroma residual. Being darker than the
 * background counts 70% (a soft cast shadow on a plain backdrop is a darker, same-hue background: it stays
 * background), being lighter or differently coloured counts fully.
 */
function distance(r: number, g: number, b: number, bg: Rgb): number {
  const dr = r - bg.r;
  const dg = g - bg.g;
  const db = b - bg.b;
  const dl = 0.299 * dr + 0.587 * dg + 0.114 * db;
  const cr = dr - dl;
  const cg = dg - dl;
  const cb = db - dl;
  const l = dl < 0 ? dl * 0.7 : dl;
  return Math.sqrt(cr * cr + cg * cg + cb * cb + 3 * l * l);
}

/** Key the background out of `image` (RGB or RGBA). Pure and deterministic. */
export function keyBackground(image: RawImage, options: KeyOptions = {}): KeyResult {
  const { data, width, height, channels: c } = image;
  const n = width * height;
  const border = estimateBorder(image);
  const keepRatio = options.keepRatio ?? 1;

  // An input with its own transparency (a cut-out PNG) is keyed by that alpha.
  if (c === 4 && border.alpha < 128) {
    const hard = new Uint8Array(n);
    for (let i = 0; i < n; i++) hard[i] = data[i * 4 + 3] >= 128 ? 1 : 0;
    const kept = keepComponents(hard, width, height, keepRatio);
    const near = dilate(kept, width, height, 2);
    const alpha = new Uint8Array(n);
    for (let i = 0; i < n; i++) alpha[i] = near[i] ? data[i * 4 + 3] : 0;
    return finish(alpha, kept, width, height, border.colour, true);
  }

  if (border.noise > (options.maxBorderNoise ?? 48)) {
    return opaque(width, height, border.colour);
  }

  const t0 = clamp(border.noise * 1.25 + 8, 14, 70);
  const t1 = t0 + 30;
  const tFill = (t0 + t1) / 2;
  const dist = new Float32Array(n);
  for (let i = 0, p = 0; i < n; i++, p += c) {
    dist[i] = distance(data[p], data[p + 1], data[p + 2], border.colour);
  }

  // Background = border-connected pixels close to the border colour (4-connected flood fill).
  const bg = new Uint8Array(n);
  const queue = new Int32Array(n);
  let head = 0;
  let tail = 0;
  const seed = (i: number): void => {
    if (!bg[i] && dist[i] < tFill) {
      bg[i] = 1;
      queue[tail++] = i;
    }
  };
  for (let x = 0; x < width; x++) {
    seed(x);
    seed((height - 1) * width + x);
  }
  for (let y = 0; y < height; y++) {
    seed(y * width);
    seed(y * width + width - 1);
  }
  while (head < tail) {
    const i = queue[head++];
    const x = i % width;
    if (x > 0) seed(i - 1);
    if (x < width - 1) seed(i + 1);
    if (i >= width) seed(i - width);
    if (i < n - width) seed(i + width);
  }

  const hard = new Uint8Array(n);
  for (let i = 0; i < n; i++) hard[i] = bg[i] ? 0 : 1;
  const kept = keepComponents(hard, width, height, keepRatio);
  // Soft edge: within 2 px of the boundary between the kept foreground and the background, a pixel is taken as
  // a linear mix of the background colour and the nearby solid foreground colour, so its alpha is its colour
  // distance relative to the largest distance among the kept pixels around it (anti-aliased edges, no light
  // fringe). Everything further out is fully transparent, everything further in fully opaque.
  const near = dilate(kept, width, height, 2);
  const edge = dilate(bg, width, height, 2);
  const alpha = new Uint8Array(n);
  const radius = 3;
  for (let i = 0; i < n; i++) {
    const isKept = kept[i] === 1;
    if (isKept && (!edge[i] || dist[i] < tFill)) {
      alpha[i] = 255;
      continue;
    }
    if (!isKept && !near[i]) continue;
    const x = i % width;
    const y = (i - x) / width;
    let solid = 0;
    for (let yy = Math.max(0, y - radius); yy <= Math.min(height - 1, y + radius); yy++) {
      for (let xx = Math.max(0, x - radius); xx <= Math.min(width - 1, x + radius); xx++) {
        const j = yy * width + xx;
        if (kept[j] && dist[j] > solid) solid = dist[j];
      }
    }
    const full = Math.max(solid, t1);
    alpha[i] = clampByte(clamp((dist[i] - t0) / (full - t0), 0, 1) * 255);
  }
  return finish(alpha, kept, width, height, border.colour, false);
}

function finish(alpha: Uint8Array, kept: Uint8Array, width: number, height: number, background: Rgb, fromInputAlpha: boolean): KeyResult {
  let count = 0;
  for (let i = 0; i < kept.length; i++) count += kept[i];
  const coverage = count / kept.length;
  if (coverage < 0.002 || coverage > 0.97) {
    return opaque(width, height, background);
  }
  const box = boundingBox({ data: alpha, width, height }, 16) ?? { left: 0, top: 0, right: width, bottom: height };
  return { alpha: { data: alpha, width, height }, background, reliable: true, box, coverage, fromInputAlpha };
}

function opaque(width: number, height: number, background: Rgb): KeyResult {
  return {
    alpha: { data: new Uint8Array(width * height).fill(255), width, height },
    background,
    reliable: false,
    box: { left: 0, top: 0, right: width, bottom: height },
    coverage: 1,
    fromInputAlpha: false,
  };
}

/** Keep the largest 4-connected component of a 0/1 mask, plus any at least `ratio` of its size. */
export function keepComponents(mask: Uint8Array, width: number, height: number, ratio = 1): Uint8Array {
  const n = width * height;
  const labels = new Int32Array(n);
  const queue = new Int32Array(n);
  const sizes: number[] = [0];
  for (let start = 0; start < n; start++) {
    if (!mask[start] || labels[start]) continue;
    const label = sizes.length;
    let head = 0;
    let tail = 0;
    labels[start] = label;
    queue[tail++] = start;
    while (head < tail) {
      const i = queue[head++];
      const x = i % width;
      if (x > 0 && mask[i - 1] && !labels[i - 1]) {
        labels[i - 1] = label;
        queue[tail++] = i - 1;
      }
      if (x < width - 1 && mask[i + 1] && !labels[i + 1]) {
        labels[i + 1] = label;
        queue[tail++] = i + 1;
      }
      if (i >= width && mask[i - width] && !labels[i - width]) {
        labels[i - width] = label;
        queue[tail++] = i - width;
      }
      if (i < n - width && mask[i + width] && !labels[i + width]) {
        labels[i + width] = label;
        queue[tail++] = i + width;
      }
    }
    sizes.push(tail);
  }
  let largest = 0;
  for (let l = 1; l < sizes.length; l++) largest = Math.max(largest, sizes[l]);
  const keep = new Uint8Array(sizes.length);
  for (let l = 1; l < sizes.length; l++) keep[l] = sizes[l] > 0 && sizes[l] >= largest * ratio ? 1 : 0;
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = keep[labels[i]];
  return out;
}

/** Square dilation of a 0/1 mask by `radius` pixels (separable running max). */
export function dilate(mask: Uint8Array, width: number, height: number, radius: number): Uint8Array {
  const tmp = new Uint8Array(mask.length);
  for (let y = 0; y < height; y++) {
    const row = y * width;
    for (let x = 0; x < width; x++) {
      if (!mask[row + x]) continue;
      const x0 = Math.max(0, x - radius);
      const x1 = Math.min(width - 1, x + radius);
      for (let k = x0; k <= x1; k++) tmp[row + k] = 1;
    }
  }
  const out = new Uint8Array(mask.length);
  for (let y = 0; y < height; y++) {
    const row = y * width;
    for (let x = 0; x < width; x++) {
      if (!tmp[row + x]) continue;
      const y0 = Math.max(0, y - radius);
      const y1 = Math.min(height - 1, y + radius);
      for (let k = y0; k <= y1; k++) out[k * width + x] = 1;
    }
  }
  return out;
}

/** Bounding box of the pixels >= threshold, or null when there are none. */
export function boundingBox(plane: Plane, threshold: number): Box | null {
  const { data, width, height } = plane;
  let left = width;
  let right = -1;
  let top = height;
  let bottom = -1;
  for (let y = 0; y < height; y++) {
    const row = y * width;
    let rowLeft = -1;
    let rowRight = -1;
    for (let x = 0; x < width; x++) {
      if (data[row + x] >= threshold) {
        if (rowLeft < 0) rowLeft = x;
        rowRight = x;
      }
    }
    if (rowLeft >= 0) {
      left = Math.min(left, rowLeft);
      right = Math.max(right, rowRight);
      top = Math.min(top, y);
      bottom = y;
    }
  }
  return right < 0 ? null : { left, top, right: right + 1, bottom: bottom + 1 };
}

/**
 * The keyed foreground as an RGBA image cropped to its bounding box. Semi-transparent edge pixels are
 * "un-mixed" from the background colour so no light (or dark) fringe of the old background is carried over.
 */
export function extractForeground(image: RawImage, key: KeyResult): RawImage {
  const { left, top, right, bottom } = key.box;
  const w = right - left;
  const h = bottom - top;
  const c = image.channels;
  const out = Buffer.alloc(w * h * 4);
  const bg = key.background;
  const alpha = key.alpha.data;
  const unmix = key.reliable && !key.fromInputAlpha;
  for (let y = 0; y < h; y++) {
    for (let x = 0; x < w; x++) {
      const si = (top + y) * image.width + left + x;
      const sp = si * c;
      const op = (y * w + x) * 4;
      const a = alpha[si];
      let r = image.data[sp];
      let g = image.data[sp + 1];
      let b = image.data[sp + 2];
      if (unmix && a > 0 && a < 255) {
        const k = a / 255;
        r = clampByte((r - (1 - k) * bg.r) / k);
        g = clampByte((g - (1 - k) * bg.g) / k);
        b = clampByte((b - (1 - k) * bg.b) / k);
      }
      out[op] = r;
      out[op + 1] = g;
      out[op + 2] = b;
      out[op + 3] = a;
    }
  }
  return { data: out, width: w, height: h, channels: 4 };
}

/**
 * Horizontal extent of the opaque run (alpha >= 128) on row `y` that contains column `x`, or the run nearest
 * to it; null when the row is empty.
 */
export function runAt(plane: Plane, y: number, x: number): { left: number; right: number } | null {
  const { data, width } = plane;
  const row = y * width;
  let best: { left: number; right: number } | null = null;
  let bestGap = Infinity;
  let xx = 0;
  while (xx < width) {
    if (data[row + xx] < 128) {
      xx++;
      continue;
    }
    const start = xx;
    while (xx < width && data[row + xx] >= 128) xx++;
    const end = xx; // exclusive
    const gap = x < start ? start - x : x >= end ? x - end + 1 : 0;
    if (gap < bestGap) {
      bestGap = gap;
      best = { left: start, right: end };
    }
  }
  return best;
}
