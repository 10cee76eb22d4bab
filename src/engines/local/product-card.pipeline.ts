/**
 * Product card: the garment keyed out of its background, scaled to fit a fixed 1024x1280 (4:5, the usual
 * marketplace portrait) card with generous margins (at most 74% of the width and 70% of the height), centred
 * slightly above the middle, on a clean light vertical gradient, with a soft drop shadow below it.
 * When the garment photo has a busy background the whole photo is placed on the card instead.
 */
import { alphaOf, applyShade, compositeOver, softShadow } from './compose.js';
import { analyseObject, cutoutAt, requireCutOut } from './cutout.js';
import type { Pipeline } from './pipeline.js';
import type { Plane, RawImage } from './raw-image.js';

// Math functions as module constants: a global lookup per call is very slow inside Jest's vm contexts.
const { ceil, max, min, round } = Math;

export const CARD_WIDTH = 1024;
export const CARD_HEIGHT = 1280;
/** Background gradient, top and bottom colours. */
const CARD_TOP = { r: 248, g: 247, b: 245 };
const CARD_BOTTOM = { r: 234, g: 232, b: 228 };

export const productCardPipeline: Pipeline = async (ctx) => {
  const clothes = await ctx.image('clothes', { alpha: true });
  ctx.checkpoint(0.2);
  const garment = await analyseObject(clothes);
  requireCutOut(garment, 'clothes', 'the garment alone (a flat lay or a studio shot)');
  const boxW = garment.box.right - garment.box.left;
  const boxH = garment.box.bottom - garment.box.top;
  const scale = min((CARD_WIDTH * 0.74) / boxW, (CARD_HEIGHT * 0.7) / boxH);
  const width = max(1, round(boxW * scale));
  const height = max(1, round(boxH * scale));
  // Where the garment's box is drawn.
  const boxLeft = round((CARD_WIDTH - width) / 2);
  const boxTop = round(CARD_HEIGHT * 0.47 - height / 2);
  const card = gradientCard();
  // A soft drop shadow falling down-light from above.
  const sigma = CARD_WIDTH * 0.012;
  const pad = ceil(sigma * 3);
  const shade = (silhouette: Plane, left: number, top: number, drawnWidth?: number, drawnHeight?: number) =>
    applyShade(
      card,
      softShadow(silhouette, sigma, pad, drawnWidth, drawnHeight),
      left - pad,
      top - pad + round(CARD_HEIGHT * 0.014),
      0.24,
    );
  // A plain-background garment's shadow needs only its silhouette from the analysis: the card is shaded while
  // sharp enlarges the cut-out on another thread.
  const [cut] = await Promise.all([
    cutoutAt(clothes, garment, width, height),
    garment.reliable ? Promise.resolve(shade(garment.silhouette, boxLeft, boxTop, width, height)) : undefined,
  ]);
  ctx.checkpoint(0.8);
  const left = boxLeft - cut.left;
  const top = boxTop - cut.top;
  if (!garment.reliable) shade(alphaOf(cut.image), left, top);
  compositeOver(card, cut.image, left, top);
  return card;
};

function gradientCard(): RawImage {
  const data = Buffer.allocUnsafe(CARD_WIDTH * CARD_HEIGHT * 3);
  const rowBytes = CARD_WIDTH * 3;
  for (let y = 0; y < CARD_HEIGHT; y++) {
    const t = y / (CARD_HEIGHT - 1);
    const r = round(CARD_TOP.r + (CARD_BOTTOM.r - CARD_TOP.r) * t);
    const g = round(CARD_TOP.g + (CARD_BOTTOM.g - CARD_TOP.g) * t);
    const b = round(CARD_TOP.b + (CARD_BOTTOM.b - CARD_TOP.b) * t);
    data.fill(Buffer.of(r, g, b), y * rowBytes, (y + 1) * rowBytes);
  }
  return { data, width: CARD_WIDTH, height: CARD_HEIGHT, channels: 3 };
}
