/**
 * Product card: the garment keyed out of its background, scaled to fit a fixed 1024x1280 (4:5, the usual
 * marketplace portrait) card with generous margins (at most 74% of the width and 70% of the height), centred
 * slightly above the middle, on a clean light vertical gradient, with a soft drop shadow below it.
 * When the garment photo has a busy background the whole photo is placed on the card instead.
 */
import { alphaOf, applyShade, compositeOver, softShadow } from './compose.js';
import { extractForeground, keyBackground } from './keying.js';
import type { Pipeline } from './pipeline.js';
import { type RawImage, resizeRgba } from './raw-image.js';

export const CARD_WIDTH = 1024;
export const CARD_HEIGHT = 1280;
/** Background gradient, top and bottom colours. */
export const CARD_TOP = { r: 248, g: 247, b: 245 };
export const CARD_BOTTOM = { r: 234, g: 232, b: 228 };

export const productCardPipeline: Pipeline = async (ctx) => {
  const clothes = await ctx.image('clothes', { alpha: true });
  ctx.checkpoint();
  const key = keyBackground(clothes);
  const garment = extractForeground(clothes, key);

  const scale = Math.min((CARD_WIDTH * 0.74) / garment.width, (CARD_HEIGHT * 0.7) / garment.height);
  const width = Math.max(1, Math.round(garment.width * scale));
  const height = Math.max(1, Math.round(garment.height * scale));
  const fitted = await resizeRgba(garment, width, height);
  ctx.checkpoint();
  const left = Math.round((CARD_WIDTH - width) / 2);
  const top = Math.round(CARD_HEIGHT * 0.47 - height / 2);

  const card = gradientCard();
  const alpha = alphaOf(fitted);
  // A wide soft shadow falling down, plus a tighter one that grounds the garment's outline.
  const wideSigma = CARD_WIDTH * 0.018;
  const widePad = Math.ceil(wideSigma * 3);
  const tightSigma = CARD_WIDTH * 0.005;
  const tightPad = Math.ceil(tightSigma * 3);
  const [wide, tight] = await Promise.all([softShadow(alpha, wideSigma, widePad), softShadow(alpha, tightSigma, tightPad)]);
  ctx.checkpoint();
  applyShade(card, wide, left - widePad, top - widePad + Math.round(CARD_HEIGHT * 0.02), 0.2);
  applyShade(card, tight, left - tightPad, top - tightPad + Math.round(CARD_HEIGHT * 0.004), 0.12);
  compositeOver(card, fitted, left, top);
  return card;
};

function gradientCard(): RawImage {
  const data = Buffer.alloc(CARD_WIDTH * CARD_HEIGHT * 3);
  const row = Buffer.alloc(CARD_WIDTH * 3);
  for (let y = 0; y < CARD_HEIGHT; y++) {
    const t = y / (CARD_HEIGHT - 1);
    const r = Math.round(CARD_TOP.r + (CARD_BOTTOM.r - CARD_TOP.r) * t);
    const g = Math.round(CARD_TOP.g + (CARD_BOTTOM.g - CARD_TOP.g) * t);
    const b = Math.round(CARD_TOP.b + (CARD_BOTTOM.b - CARD_TOP.b) * t);
    for (let x = 0; x < CARD_WIDTH; x++) {
      row[x * 3] = r;
      row[x * 3 + 1] = g;
      row[x * 3 + 2] = b;
    }
    row.copy(data, y * CARD_WIDTH * 3);
  }
  return { data, width: CARD_WIDTH, height: CARD_HEIGHT, channels: 3 };
}
