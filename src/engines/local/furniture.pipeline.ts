/**
 * Furniture placement: the piece is keyed out of its (plain) background and stood on the room's floor.
 *
 * The floor line (where the back wall meets the floor) is found as the strongest horizontal colour change in
 * the middle columns between 30% and 85% of the height (fallback: 58%). The piece's feet go 60% of the way
 * from the floor line down to the bottom edge; it is scaled to 40% of the room width (smaller if it would then
 * be taller than 55% of the height above its feet: a chair does not reach the ceiling), centred horizontally,
 * and grounded with a soft elliptical ambient shadow plus darker contact shadows under its feet (the bottom of
 * its silhouette, blurred). A piece photographed on a busy background is placed whole with a feathered edge.
 * Output size = the room image.
 */
import { alphaOf, applyShade, compositeOver, ellipseShade, softShadow } from './compose.js';
import { analyseObject, cutoutAt, requireCutOut } from './cutout.js';
import type { Pipeline } from './pipeline.js';
import { type RawImage, clamp } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { ceil, floor, max, min, round, sqrt } = Math;

const FURNITURE_WIDTH_RATIO = 0.4;

export const furniturePlacementPipeline: Pipeline = async (ctx) => {
  const [room, furniture] = await Promise.all([ctx.image('room'), ctx.image('furniture', { alpha: true })]);
  ctx.checkpoint(0.2);
  const piece = await analyseObject(furniture);
  requireCutOut(piece, 'furniture', 'the piece alone (a catalogue or studio shot)');
  const boxW = piece.box.right - piece.box.left;
  const boxH = piece.box.bottom - piece.box.top;
  const floorY = findFloorLine(room);
  const footY = round(floorY + (room.height - floorY) * 0.6);

  let width = room.width * FURNITURE_WIDTH_RATIO;
  let height = (width * boxH) / boxW;
  // Not taller than 55% of the height above its feet (a chair does not reach the ceiling).
  const maxHeight = footY * 0.55;
  if (height > maxHeight) {
    width *= maxHeight / height;
    height = maxHeight;
  }
  const w = max(1, round(width));
  const h = max(1, round(height));
  const cut = await cutoutAt(furniture, piece, w, h);
  ctx.checkpoint(0.6);
  const boxLeft = round((room.width - w) / 2);
  const boxTop = footY - h;

  const output: RawImage = { ...room, data: Buffer.from(room.data) };
  // Ambient occlusion: a wide soft ellipse on the floor under the piece.
  const ambient = ellipseShade(w * 0.3, max(2, w * 0.035));
  applyShade(
    output,
    ambient,
    round(room.width / 2 - ambient.width / 2),
    round(footY - h * 0.01 - ambient.height / 2),
    0.5,
  );
  // Contact shadows: the bottom of the silhouette (legs, base) blurred, right where it touches the floor.
  const alpha = alphaOf(cut.image);
  const bandRows = max(2, round(h * 0.06));
  const bandTop = clamp(cut.top + h - bandRows, 0, alpha.height - 1);
  const bandBottom = clamp(cut.top + h, bandTop + 1, alpha.height);
  const band = {
    data: alpha.data.subarray(bandTop * alpha.width, bandBottom * alpha.width),
    width: alpha.width,
    height: bandBottom - bandTop,
  };
  const sigma = max(1, w * 0.01);
  const pad = ceil(sigma * 3);
  const contact = softShadow(band, sigma, pad);
  ctx.checkpoint(0.8);
  const imageLeft = boxLeft - cut.left;
  const imageTop = boxTop - cut.top;
  applyShade(output, contact, imageLeft - pad, imageTop + bandTop - pad + round(sigma), 0.55);
  compositeOver(output, cut.image, imageLeft, imageTop);
  return output;
};

/** Row of the strongest horizontal colour edge in the middle half of the columns (the wall/floor line). */
function findFloorLine(room: RawImage): number {
  const { data, width, height, channels: c } = room;
  const x0 = floor(width * 0.25);
  const x1 = ceil(width * 0.75);
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
  const k = max(2, round(height * 0.03));
  let best = -1;
  let bestY = round(height * 0.58);
  for (let y = max(k, round(height * 0.3)); y <= min(height - k, round(height * 0.85)); y++) {
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
  return sqrt(best) >= 10 ? bestY : round(height * 0.58);
}
