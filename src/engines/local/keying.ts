/**
 * Background keying shared by every local pipeline: the background colour is estimated from the image
 * border (per-channel median of a 1% band; of its plain edges only when the object runs off one or two of them), the background is the border-connected region close to that
 * colour (a darker shade of it, a soft cast shadow, counts as close), and alpha gets a soft edge from the
 * colour distance. The largest connected foreground (optionally: every part at least a fraction of it) is
 * kept, so specks, dust and a separate price tag drop out, while enclosed areas that happen to be
 * background-coloured (a white print on a white shirt) stay opaque and small bites out of the outline are
 * closed. An input with its own transparency is keyed by its alpha instead. A busy border (no plain
 * background), an object running off three or four edges, or nothing standing out gives an opaque,
 * `reliable: false` result with its `problem`, which the callers' refusals name.
 */
import { type Box, type Plane, type RawImage, type Rgb, clamp, clampByte } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { max, min, round, sqrt } = Math;

export interface KeyOptions {
  /** Keep every connected foreground part of at least this fraction of the largest one (1 = the largest only). */
  keepRatio?: number;
  /** Border colour spread (90th percentile distance) above which the background is not "plain". Default 48. */
  maxBorderNoise?: number;
  /**
   * Closing radius as a fraction of the long side (default 0.01): fills bites out of the outline where a
   * background-coloured print touches the edge. 0 keeps the raw silhouette (body measurements).
   */
  closing?: number;
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
  /** Why the result is not reliable. */
  problem?: KeyProblem;
  /** Bounding box of the foreground (alpha >= 16); the whole image when unreliable. */
  box: Box;
  /** Fraction of the image covered by the opaque foreground. */
  coverage: number;
  /** True when the alpha came from the input's own transparency rather than from colour keying. */
  fromInputAlpha: boolean;
}

/** Why a background could not be keyed out: the callers' refusals name it. */
export type KeyProblem =
  /** No plain colour along the edges: the background is a scene or a texture. */
  | 'busy_background'
  /** A plain background shows along at most one edge, or the object covers almost all of the image. */
  | 'fills_frame'
  /** Nothing stands out from the plain background. */
  | 'nothing_found';

interface BorderStats {
  colour: Rgb;
  /** 90th percentile of the background border pixels' distance to `colour`. */
  noise: number;
  /** Median alpha of the border (255 for RGB images). */
  alpha: number;
  /** Set when the border shows no plain background to key by. */
  problem?: KeyProblem;
}

const MAX_DIST = 512; // histogram bound for distance() values
/** Plain edges whose colours differ by more than this are not the same backdrop. */
const SIDES_AGREE = 24;

/** Pixel offsets (into the image's data) of one band along the image border, with their statistics. */
interface Band {
  offsets: number[];
  colour: Rgb;
  noise: number;
}

/**
 * The background colour and spread along the image border (a band 1% of the short side wide). All four edges when
 * they are plain together; otherwise the plain edges that agree on one colour, at least two of them, so that an
 * object standing on one edge (a catalogue shot cropped at the feet) or in a corner is keyed from the others.
 */
function estimateBorder(image: RawImage, maxNoise: number): BorderStats {
  const { data, width, height, channels: c } = image;
  const band = max(1, round(min(width, height) * 0.01));
  const rows = (y0: number, y1: number): number[] => {
    const offsets: number[] = [];
    for (let y = y0; y < y1; y++) for (let x = 0; x < width; x++) offsets.push((y * width + x) * c);
    return offsets;
  };
  const columns = (x0: number, x1: number): number[] => {
    const offsets: number[] = [];
    for (let y = band; y < height - band; y++) for (let x = x0; x < x1; x++) offsets.push((y * width + x) * c);
    return offsets;
  };
  const edges = [rows(0, band), rows(height - band, height), columns(0, band), columns(width - band, width)];
  const all = bandOf(data, edges.flat());
  const alphaHist = new Uint32Array(256);
  for (const p of all.offsets) alphaHist[c === 4 ? data[p + 3] : 255]++;
  const alpha = medianOf(alphaHist, all.offsets.length);
  if (all.noise <= maxNoise) return { colour: all.colour, noise: all.noise, alpha };

  const sides = edges.filter((offsets) => offsets.length > 0).map((offsets) => bandOf(data, offsets));
  const plain = sides.filter((side) => side.noise <= maxNoise).sort((a, b) => a.noise - b.noise);
  if (plain.length > 0) {
    const agreeing = plain.filter(
      (side) => distance(side.colour.r, side.colour.g, side.colour.b, plain[0].colour) <= SIDES_AGREE,
    );
    if (agreeing.length >= 2) {
      const backdrop = bandOf(
        data,
        agreeing.flatMap((side) => side.offsets),
      );
      if (backdrop.noise <= maxNoise) return { colour: backdrop.colour, noise: backdrop.noise, alpha };
    }
    // One plain edge: the object reaches the other three.
    if (agreeing.length === 1) return { ...all, alpha, problem: 'fills_frame' };
  }
  // No plain edge at all: still a plain backdrop when most of the border is close to one colour and the rest is
  // the object running off the edges.
  let close = 0;
  for (const p of all.offsets) if (distance(data[p], data[p + 1], data[p + 2], all.colour) <= PLAIN_SPREAD) close++;
  return { ...all, alpha, problem: close >= all.offsets.length * 0.5 ? 'fills_frame' : 'busy_background' };
}

/** Border pixels within this distance of their median colour count as one plain backdrop. */
const PLAIN_SPREAD = 16;

/** Per-channel median colour and the 90th percentile distance to it of the pixels at `offsets`. */
function bandOf(data: Buffer, offsets: number[]): Band {
  const hist = [new Uint32Array(256), new Uint32Array(256), new Uint32Array(256)];
  for (const p of offsets) {
    hist[0][data[p]]++;
    hist[1][data[p + 1]]++;
    hist[2][data[p + 2]]++;
  }
  const colour = {
    r: medianOf(hist[0], offsets.length),
    g: medianOf(hist[1], offsets.length),
    b: medianOf(hist[2], offsets.length),
  };
  const distHist = new Uint32Array(MAX_DIST + 1);
  for (const p of offsets) distHist[min(MAX_DIST, round(distance(data[p], data[p + 1], data[p + 2], colour)))]++;
  let acc = 0;
  let noise = MAX_DIST;
  for (let d = 0; d <= MAX_DIST; d++) {
    acc += distHist[d];
    if (acc >= offsets.length * 0.9) {
      noise = d;
      break;
    }
  }
  return { offsets, colour, noise };
}

function medianOf(hist: Uint32Array, count: number): number {
  const half = count / 2;
  let acc = 0;
  for (let v = 0; v < 256; v++) {
    acc += hist[v];
    if (acc >= half) return v;
  }
  return 255;
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
  return sqrt(cr * cr + cg * cg + cb * cb + 3 * l * l);
}

/** Key the background out of `image` (RGB or RGBA). Pure and deterministic. */
export function keyBackground(image: RawImage, options: KeyOptions = {}): KeyResult {
  const { data, width, height, channels: c } = image;
  const n = width * height;
  const border = estimateBorder(image, options.maxBorderNoise ?? 48);
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

  if (border.problem) return opaque(width, height, border.colour, border.problem);

  const t0 = clamp(border.noise * 1.25 + 8, 14, 70);
  const t1 = t0 + 30;
  const tFill = (t0 + t1) / 2;
  // distance() inlined: this loop runs once per pixel.
  const dist = new Float32Array(n);
  const candidate = new Uint8Array(n);
  const { r: bgR, g: bgG, b: bgB } = border.colour;
  for (let i = 0, p = 0; i < n; i++, p += c) {
    const dr = data[p] - bgR;
    const dg = data[p + 1] - bgG;
    const db = data[p + 2] - bgB;
    const dl = 0.299 * dr + 0.587 * dg + 0.114 * db;
    const cr = dr - dl;
    const cg = dg - dl;
    const cb = db - dl;
    const l = dl < 0 ? dl * 0.7 : dl;
    const d = sqrt(cr * cr + cg * cg + cb * cb + 3 * l * l);
    dist[i] = d;
    candidate[i] = d < tFill ? 1 : 0;
  }

  // Background = border-connected pixels close to the border colour (4-connected).
  const bg = paintRuns(
    labelRuns(candidate, width, height),
    width,
    height,
    (runs, root) => runs.touchesBorder[root] === 1,
  );
  const hard = candidate; // reused: no longer needed
  for (let i = 0; i < n; i++) hard[i] = 1 - bg[i];
  // Closing (dilate, then erode) by 1% of the size (by default): small bites out of the outline, where a
  // background-coloured print or pattern touches the edge, are filled back in and stop being background.
  const closing = round(max(width, height) * (options.closing ?? 0.01));
  const largest = keepComponents(hard, width, height, keepRatio);
  const kept = closing > 0 ? close(largest, width, height, closing) : largest;
  for (let i = 0; i < n; i++) if (kept[i]) bg[i] = 0;
  // Soft edge: within 2 px of the boundary between the kept foreground and the background, a pixel is taken as
  // a linear mix of the background colour and the nearby solid foreground colour, so its alpha is its colour
  // distance relative to the largest distance among the kept pixels around it (anti-aliased edges, no light
  // fringe). Everything further out is fully transparent, everything further in fully opaque.
  const near = dilate(kept, width, height, 2);
  const edge = dilate(bg, width, height, 2);
  const alpha = new Uint8Array(n);
  const radius = 3;
  for (let y = 0, i = 0; y < height; y++) {
    for (let x = 0; x < width; x++, i++) {
      const isKept = kept[i] === 1;
      if (isKept && (!edge[i] || dist[i] < tFill)) {
        alpha[i] = 255;
        continue;
      }
      if (!isKept && !near[i]) continue;
      let solid = 0;
      const y1 = min(height - 1, y + radius);
      const x0 = max(0, x - radius);
      const x1 = min(width - 1, x + radius);
      for (let yy = max(0, y - radius); yy <= y1; yy++) {
        for (let j = yy * width + x0, end = yy * width + x1; j <= end; j++) {
          if (kept[j] && dist[j] > solid) solid = dist[j];
        }
      }
      const full = max(solid, t1);
      alpha[i] = clampByte(clamp((dist[i] - t0) / (full - t0), 0, 1) * 255);
    }
  }
  return finish(alpha, kept, width, height, border.colour, false);
}

function finish(
  alpha: Uint8Array,
  kept: Uint8Array,
  width: number,
  height: number,
  background: Rgb,
  fromInputAlpha: boolean,
): KeyResult {
  let count = 0;
  for (let i = 0; i < kept.length; i++) count += kept[i];
  const coverage = count / kept.length;
  if (coverage < 0.002) return opaque(width, height, background, 'nothing_found');
  if (coverage > 0.97) return opaque(width, height, background, 'fills_frame');
  const box = boundingBox({ data: alpha, width, height }, 16) ?? { left: 0, top: 0, right: width, bottom: height };
  return { alpha: { data: alpha, width, height }, background, reliable: true, box, coverage, fromInputAlpha };
}

function opaque(width: number, height: number, background: Rgb, problem: KeyProblem): KeyResult {
  return {
    alpha: { data: new Uint8Array(width * height).fill(255), width, height },
    background,
    reliable: false,
    problem,
    box: { left: 0, top: 0, right: width, bottom: height },
    coverage: 1,
    fromInputAlpha: false,
  };
}

/**
 * 4-connected components of a 0/1 mask, labelled on horizontal runs (a union-find over runs that overlap in
 * adjacent rows): far cheaper in JS than a per-pixel flood fill.
 */
interface Runs {
  /** Runs of row y are indices rowStart[y] .. rowStart[y + 1] - 1. */
  rowStart: Int32Array;
  left: Int32Array;
  /** Exclusive. */
  right: Int32Array;
  /** Component id (the union-find root) of every run. */
  root: Int32Array;
  /** Pixels per component, indexed by root. */
  size: Int32Array;
  /** 1 when the component touches the image border, indexed by root. */
  touchesBorder: Uint8Array;
}

function labelRuns(mask: Uint8Array, width: number, height: number): Runs {
  const rowStart = new Int32Array(height + 1);
  const lefts: number[] = [];
  const rights: number[] = [];
  for (let y = 0; y < height; y++) {
    rowStart[y] = lefts.length;
    const row = y * width;
    let x = 0;
    while (x < width) {
      if (!mask[row + x]) {
        x++;
        continue;
      }
      const start = x;
      while (x < width && mask[row + x]) x++;
      lefts.push(start);
      rights.push(x);
    }
  }
  rowStart[height] = lefts.length;
  const count = lefts.length;
  const left = Int32Array.from(lefts);
  const right = Int32Array.from(rights);
  const parent = new Int32Array(count);
  for (let i = 0; i < count; i++) parent[i] = i;
  const find = (i: number): number => {
    while (parent[i] !== i) {
      parent[i] = parent[parent[i]];
      i = parent[i];
    }
    return i;
  };
  for (let y = 1; y < height; y++) {
    let j = rowStart[y - 1];
    const prevEnd = rowStart[y];
    for (let r = rowStart[y]; r < rowStart[y + 1]; r++) {
      while (j < prevEnd && right[j] <= left[r]) j++;
      for (let k = j; k < prevEnd && left[k] < right[r]; k++) {
        const a = find(r);
        const b = find(k);
        if (a !== b) parent[a < b ? b : a] = a < b ? a : b;
      }
    }
  }
  const root = new Int32Array(count);
  const size = new Int32Array(count);
  const touchesBorder = new Uint8Array(count);
  for (let y = 0; y < height; y++) {
    for (let r = rowStart[y]; r < rowStart[y + 1]; r++) {
      const id = find(r);
      root[r] = id;
      size[id] += right[r] - left[r];
      if (y === 0 || y === height - 1 || left[r] === 0 || right[r] === width) touchesBorder[id] = 1;
    }
  }
  return { rowStart, left, right, root, size, touchesBorder };
}

/** A 0/1 mask of the runs whose component passes `keep`. */
function paintRuns(runs: Runs, width: number, height: number, keep: (runs: Runs, root: number) => boolean): Uint8Array {
  const out = new Uint8Array(width * height);
  const decided = new Int8Array(runs.root.length); // 0 unknown, 1 keep, -1 drop (indexed by root)
  for (let y = 0; y < height; y++) {
    for (let r = runs.rowStart[y]; r < runs.rowStart[y + 1]; r++) {
      const id = runs.root[r];
      if (decided[id] === 0) decided[id] = keep(runs, id) ? 1 : -1;
      if (decided[id] === 1) out.fill(1, y * width + runs.left[r], y * width + runs.right[r]);
    }
  }
  return out;
}

/** Keep the largest 4-connected component of a 0/1 mask, plus any at least `ratio` of its size. */
function keepComponents(mask: Uint8Array, width: number, height: number, ratio = 1): Uint8Array {
  const runs = labelRuns(mask, width, height);
  let largest = 0;
  for (let i = 0; i < runs.size.length; i++) largest = max(largest, runs.size[i]);
  return paintRuns(runs, width, height, (r, id) => r.size[id] >= largest * ratio);
}

/**
 * Square dilation of a 0/1 mask by `radius` pixels. Horizontally every run is widened (native fills). Vertically,
 * on a copy whose rows are padded to a multiple of 4 bytes (so 4 pixels are OR-ed at a time) and which starts
 * with `radius` empty rows, output row y is the OR of copy rows y .. y + 2 * radius, built with doubling window
 * lengths (1, 2, 4, ...): about log2(2 * radius + 1) passes over the mask whatever the radius.
 *
 * Hand-written rather than sharp's `erode`/`dilate`, which give the very same masks: libvips tests all of a
 * (2 * radius + 1)-square around every pixel, so the closing's radius (1% of the image's long side) made keying,
 * on every job's path, far more costly in CPU.
 */
function dilate(mask: Uint8Array, width: number, height: number, radius: number): Uint8Array {
  const stride = (width + 3) & ~3;
  const words = stride / 4;
  const padded = new Uint8Array(stride * (height + radius));
  for (let y = 0; y < height; y++) {
    const row = y * width;
    const dst = (y + radius) * stride;
    let x = 0;
    while (x < width) {
      if (!mask[row + x]) {
        x++;
        continue;
      }
      const start = x;
      while (x < width && mask[row + x]) x++;
      padded.fill(1, dst + max(0, start - radius), dst + min(width, x + radius));
    }
  }
  const length = radius * 2 + 1;
  let window = new Uint32Array(padded.buffer);
  let span = 1;
  while (span * 2 <= length) {
    const doubled = window.slice();
    orRowsBelow(doubled, window, span * words);
    window = doubled;
    span *= 2;
  }
  if (span < length) {
    const exact = window.slice();
    orRowsBelow(exact, window, (length - span) * words);
    window = exact;
  }
  const bytes = new Uint8Array(window.buffer);
  const out = new Uint8Array(mask.length);
  for (let y = 0; y < height; y++) out.set(bytes.subarray(y * stride, y * stride + width), y * width);
  return out;
}

/** dst[i] |= src[i + offset]; words past the end count as empty. */
function orRowsBelow(dst: Uint32Array, src: Uint32Array, offset: number): void {
  const end = src.length - offset;
  for (let i = 0; i < end; i++) dst[i] |= src[i + offset];
}

/**
 * Morphological closing: the mask plus the concavities narrower than about 2 * radius. Beyond the image's edges
 * counts as background (the mask is closed inside an empty margin): otherwise the background between an object
 * standing on an edge and that edge would be filled in.
 */
function close(mask: Uint8Array, width: number, height: number, radius: number): Uint8Array {
  const margin = 2 * radius;
  const paddedWidth = width + 2 * margin;
  const paddedHeight = height + 2 * margin;
  const padded = new Uint8Array(paddedWidth * paddedHeight);
  for (let y = 0; y < height; y++) {
    padded.set(mask.subarray(y * width, (y + 1) * width), (y + margin) * paddedWidth + margin);
  }
  const grown = dilate(padded, paddedWidth, paddedHeight, radius);
  for (let i = 0; i < grown.length; i++) grown[i] ^= 1; // complement
  const shrunk = dilate(grown, paddedWidth, paddedHeight, radius);
  const out = new Uint8Array(mask.length);
  for (let y = 0; y < height; y++) {
    const from = (y + margin) * paddedWidth + margin;
    for (let x = 0, i = y * width; x < width; x++, i++) out[i] = (shrunk[from + x] ^ 1) | mask[i];
  }
  return out;
}

/** Bounding box of the pixels >= threshold, or null when there are none. */
function boundingBox(plane: Plane, threshold: number): Box | null {
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
      left = min(left, rowLeft);
      right = max(right, rowRight);
      top = min(top, y);
      bottom = y;
    }
  }
  return right < 0 ? null : { left, top, right: right + 1, bottom: bottom + 1 };
}

/**
 * The keyed foreground as an RGBA image cropped to `box` (default: its bounding box). Semi-transparent edge pixels are
 * "un-mixed" from the background colour so no light (or dark) fringe of the old background is carried over.
 */
export function extractForeground(image: RawImage, key: KeyResult, box: Box = key.box): RawImage {
  const { left, top, right, bottom } = box;
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
