/**
 * Furniture placement: the piece is keyed out of its (plain) background and stood on the room's floor.
 *
 * The floor line (where the back wall meets the floor) is found as the strongest horizontal colour change in
 * the middle columns between 30% and 85% of the height (fallback: 58%). The piece is scaled to 40% of the room
 * width (smaller if it would not fit under the top of the frame), centred horizontally, its feet 60% of the way
 * from the floor line down to the bottom edge, grounded with a soft elliptical ambient shadow and darker contact
 * shadows under its feet. Output size = the room image.
 */
import { alphaOf, applyShade, compositeOver, ellipseShade, featherEllipse, softShadow } from './compose.js';
import { extractForeground, keyBackground } from './keying.js';
import type { Pipeline } from './pipeline.js';
import { type RawImage, resizeRgba } from './raw-image.js';

export const FURNITURE_WIDTH_RATIO = 0.4;

export const furniturePlacementPipeline: Pipeline = async (ctx) => {
  const [room, piece] = await Promise.all([ctx.image('room'), ctx.image('furniture', { alpha: true })]);
  ctx.checkpoint();
  const key = keyBackground(piece);
  let cutout = extractForeground(piece, key);
  if (!key.reliable) {
    cutout = featherEllipse(cutout);
  }
  const floorY = findFloorLine(room);
  const footY = Math.round(floorY + (room.height - floorY) * 0.6);

  let width = room.width * FURNITURE_WIDTH_RATIO;
  let height = (width * cutout.height) / cutout.width;
  const maxHeight = footY - room.height * 0.05;
  if (height > maxHeight) {
    width *= maxHeight / height;
    height = maxHeight;
  }
  const w = Math.max(1, Math.round(width));
  const h = Math.max(1, Math.round(height));
  const fitted = await resizeRgba(cutout, w, h);
  ctx.checkpoint();
  const left = Math.round((room.width - w) / 2);
  const top = footY - h;

  const output: RawImage = { ...room, data: Buffer.from(room.data) };
  // Ambient occlusion: a wide soft ellipse on the floor under the piece.
  const ambient = ellipseShade(w * 0.3, Math.max(2, w * 0.035));
  applyShade(output, ambient, Math.round(room.width / 2 - ambient.width / 2), Math.round(footY - h * 0.01 - ambient.height / 2), 0.5);
  // Contact shadows: the bottom of the silhouette (legs, base) blurred, right where it touches the floor.
  const alpha = alphaOf(fitted);
  const bandRows = Math.max(2, Math.round(h * 0.06));
  const band = { data: alpha.data.subarray((h - bandRows) * w), width: w, height: bandRows };
  const sigma = Math.max(1, w * 0.01);
  const pad = Math.ceil(sigma * 3);
  const contact = await softShadow(band, sigma, pad);
  ctx.checkpoint();
  applyShade(output, contact, left - pad, footY - bandRows - pad + Math.round(sigma), 0.55);
  compositeOver(output, fitted, left, top);
  return output;
};

/** Row of the strongest horizontal colour edge in the middle half of the columns (the wall/floor line). */
export function findFloorLine(room: RawImage): number {
  const { data, width, height, channels: c } = room;
  const x0 = Math.floor(width * 0.25);
  const x1 = Math.ceil(width * 0.75);
  // Prefix sums of per-row mean colour.
  const prefix = new Float64Array((height + 1) * 3);
  for (let y = 0; y < height; y++) {
    let r = 0;
    let g = 0;
    let b = 0;
    for (let x = x0; x < x1; x++) {
      const p = (y * width + x) * c;
      r += data[p];
      g += data[p + 1];
      b += data[p + 2];
    }
    const n = x1 - x0;
    prefix[(y + 1) * 3] = prefix[y * 3] + r / n;
    prefix[(y + 1) * 3 + 1] = prefix[y * 3 + 1] + g / n;
    prefix[(y + 1) * 3 + 2] = prefix[y * 3 + 2] + b / n;
  }
  const k = Math.max(2, Math.round(height * 0.03));
  let best = -1;
  let bestY = Math.round(height * 0.58);
  for (let y = Math.max(k, Math.round(height * 0.3)); y <= Math.min(height - k, Math.round(height * 0.85)); y++) {
    let diff = 0;
    for (let ch = 0; ch < 3; ch++) {
      const above = (prefix[y * 3 + ch] - prefix[(y - k) * 3 + ch]) / k;
      const below = (prefix[(y + k) * 3 + ch] - prefix[y * 3 + ch]) / k;
      diff += (above - below) ** 2;
    }
    if (diff > best) {
      best = diff;
      bestY = y;
    }
  }
  return Math.sqrt(best) >= 10 ? bestY : Math.round(height * 0.58);
}
