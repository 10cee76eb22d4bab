#!/usr/bin/env node
/**
 * Regenerates docs/examples/: synthetic but plausible inputs drawn with sharp from SVG, and the output of the
 * `local` engine (src/engines/local) for each tool; then the same engine on real photographs (from
 * test/fixtures/photos), where for an input the engine refuses the folder holds the error a client sees.
 *
 * Run from the repository root:
 *
 *   node scripts/make-examples.mjs
 *
 * It builds the service (`tsc -p tsconfig.json`) and runs the engine in-process through its entry point,
 * dist/engines/in-process.js (the worker runs the same engine in its engine threads); `--no-build` uses the dist/
 * already there.
 *
 * Output: docs/examples/<example>/input-<name>.jpg, output.jpg (or error.json) and docs/examples/README.md.
 * Deterministic.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import sharp from 'sharp';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const outRoot = path.join(root, 'docs/examples');
const JPEG = { quality: 85, mozjpeg: true };

if (!args.includes('--no-build')) {
  execFileSync(path.join(root, 'node_modules/.bin/tsc'), ['-p', 'tsconfig.json'], { cwd: root, stdio: 'inherit' });
}
const { LocalEngine } = await import(pathToFileURL(path.join(root, 'dist/engines/in-process.js')).href);

// ---------------------------------------------------------------------------------------------------------
// Synthetic inputs
// ---------------------------------------------------------------------------------------------------------

const svg = (width, height, body) =>
  Buffer.from(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">${body}</svg>`,
  );

/** Horizontal "cylinder" shading gradient: dark edges, lit a little left of centre. */
const cylinder = (id, dark, light) =>
  `<linearGradient id="${id}" x1="0" x2="1" y1="0" y2="0">
     <stop offset="0" stop-color="${dark}"/><stop offset="0.4" stop-color="${light}"/><stop offset="1" stop-color="${dark}"/>
   </linearGradient>`;

/**
 * A person standing in a studio: plain light backdrop, arms slightly away from the body.
 * `casual`: teal tank top and blue jeans, short hair. `base`: bare shoulders and midriff, black leggings, a bob.
 */
function personSvg(variant = 'casual') {
  const casual = variant === 'casual';
  const legs = casual ? 'url(#jeans)' : 'url(#leggings)';
  const tank = `<path d="M236 176 Q250 170 262 168 L268 168 Q282 200 300 202 Q318 200 332 168 L338 168 Q350 170 364 176
           L360 250 Q352 320 362 388 L238 388 Q248 320 240 250 Z" fill="url(#tank)"/>
  <path d="M240 250 Q252 320 238 388" stroke="#35595b" stroke-width="3" fill="none" opacity="0.6"/>
  <path d="M360 250 Q348 320 362 388" stroke="#35595b" stroke-width="3" fill="none" opacity="0.6"/>`;
  const hair = casual
    ? '<path d="M264 92 Q258 40 300 38 Q344 38 338 92 Q334 62 300 60 Q270 60 264 92 Z" fill="url(#hair)"/>'
    : '<path d="M258 118 Q246 40 300 36 Q354 40 342 118 Q338 126 332 120 Q336 70 300 62 Q266 70 268 120 Q262 126 258 118 Z" fill="url(#hair)"/>';
  return svg(
    600,
    800,
    `
  <defs>
    <radialGradient id="bg" cx="50%" cy="42%" r="80%"><stop offset="0" stop-color="#eef0f2"/><stop offset="1" stop-color="#dcdfe3"/></radialGradient>
    ${cylinder('skin', '#b97d5c', '#e8b896')}
    ${cylinder('tank', '#3f6c6e', '#6f9ea0')}
    ${cylinder('jeans', '#27406a', '#4a6b9c')}
    ${cylinder('leggings', '#16161a', '#3a3a42')}
    ${cylinder('hair', '#2b1d16', '#4a3226')}
    <radialGradient id="face" cx="45%" cy="40%" r="70%"><stop offset="0" stop-color="#efc3a2"/><stop offset="1" stop-color="#c88d6a"/></radialGradient>
  </defs>
  <rect width="600" height="800" fill="url(#bg)"/>
  <ellipse cx="300" cy="760" rx="105" ry="10" fill="#9aa0a8" opacity="0.35"/>
  <!-- legs -->
  <path d="M238 386 L299 386 L298 410 L288 736 L250 736 L240 560 Z" fill="${legs}"/>
  <path d="M301 386 L362 386 L360 560 L350 736 L312 736 L302 410 Z" fill="${legs}"/>
  <path d="M238 ${casual ? 384 : 372} L362 ${casual ? 384 : 372} L363 404 L237 404 Z" fill="${casual ? '#22385d' : '#1c1c21'}"/>
  ${casual ? '<path d="M269 560 L271 736 M331 560 L329 736" stroke="#1f3557" stroke-width="2" opacity="0.5"/>' : ''}
  <!-- shoes -->
  <path d="M250 732 L289 732 L291 752 Q290 760 270 760 L236 760 Q228 756 236 748 Z" fill="#2a2a2e"/>
  <path d="M311 732 L350 732 L364 748 Q372 756 364 760 L330 760 Q310 760 309 752 Z" fill="#2a2a2e"/>
  <!-- arms -->
  <path d="M236 168 Q208 170 204 200 L190 330 L182 416 Q184 438 200 434 Q210 430 210 412 L218 334 L236 236 Z" fill="url(#skin)"/>
  <path d="M364 168 Q392 170 396 200 L410 330 L418 416 Q416 438 400 434 Q390 430 390 412 L382 334 L364 236 Z" fill="url(#skin)"/>
  <!-- neck, shoulders and torso -->
  <path d="M285 120 L315 120 L318 160 L282 160 Z" fill="url(#skin)"/>
  <path d="M226 176 Q230 160 282 156 L318 156 Q370 160 374 176 L360 250 Q352 320 362 ${casual ? 388 : 376}
           L238 ${casual ? 388 : 376} Q248 320 240 250 Z" fill="url(#skin)"/>
  ${casual ? tank : ''}
  <!-- head -->
  <ellipse cx="300" cy="88" rx="34" ry="45" fill="url(#face)"/>
  ${hair}
  <path d="M285 84 Q290 80 294 84 M306 84 Q311 80 316 84" stroke="#3a2a22" stroke-width="2.5" fill="none"/>
  <path d="M290 112 Q300 118 310 112" stroke="#9c5a4a" stroke-width="3" fill="none"/>
  <path d="M299 90 L296 102 L302 103" stroke="#b07a5e" stroke-width="1.5" fill="none"/>`,
  );
}

/** A terracotta t-shirt laid flat on white, with folds, rib collar and a small round print. */
function tshirtSvg() {
  return svg(
    600,
    600,
    `
  <defs>
    <linearGradient id="cloth" x1="0" x2="1" y1="0" y2="1"><stop offset="0" stop-color="#d8644a"/><stop offset="1" stop-color="#b2452f"/></linearGradient>
  </defs>
  <rect width="600" height="600" fill="#ffffff"/>
  <ellipse cx="300" cy="530" rx="190" ry="10" fill="#000" opacity="0.05"/>
  <path d="M252 88 L178 108 L92 200 L138 252 L186 214 L190 522 L410 522 L414 214 L462 252 L508 200 L422 108 L348 88
           Q300 140 252 88 Z" fill="url(#cloth)"/>
  <path d="M252 88 Q300 140 348 88 L338 86 Q300 124 262 86 Z" fill="#9b3a27"/>
  <path d="M98 206 L140 246 M502 206 L460 246" stroke="#8e3424" stroke-width="5"/>
  <path d="M194 508 L406 508" stroke="#9b3a27" stroke-width="4"/>
  <path d="M230 250 Q250 380 236 500 M372 260 Q352 380 366 500 M300 300 Q310 400 296 500" stroke="#8e3424" stroke-width="6" fill="none" opacity="0.25"/>
  <path d="M240 230 Q270 250 262 330" stroke="#f0a08a" stroke-width="8" fill="none" opacity="0.25"/>
  <circle cx="300" cy="230" r="36" fill="#f4e9dc"/>
  <path d="M282 240 L300 212 L318 240 Z" fill="#b2452f"/>`,
  );
}

/** Beige chinos laid flat on white. */
function trousersSvg() {
  return svg(
    500,
    800,
    `
  <defs>${cylinder('chino', '#a88f63', '#d6c39a')}</defs>
  <rect width="500" height="800" fill="#ffffff"/>
  <path d="M150 62 L350 62 L352 100 L372 740 L262 740 L250 330 L238 740 L128 740 L148 100 Z" fill="url(#chino)"/>
  <path d="M148 62 L352 62 L352 96 L148 96 Z" fill="#b89e70"/>
  <path d="M170 60 L170 98 M215 60 L215 98 M285 60 L285 98 M330 60 L330 98" stroke="#8f7a52" stroke-width="5"/>
  <path d="M250 98 L250 300 M250 300 Q262 296 266 250 L266 100" stroke="#8f7a52" stroke-width="3" fill="none"/>
  <path d="M160 110 Q195 150 210 100 M340 110 Q305 150 290 100" stroke="#8f7a52" stroke-width="3" fill="none"/>
  <path d="M190 380 L184 735 M310 380 L316 735" stroke="#9b845a" stroke-width="3" opacity="0.6"/>
  <path d="M130 722 L238 722 M262 722 L370 722" stroke="#8f7a52" stroke-width="4"/>`,
  );
}

/** A navy polka-dot dress with a flared skirt, on white. */
function dressSvg() {
  let dots = '';
  for (let y = 120; y < 760; y += 46) {
    for (let x = 60 + ((y / 46) % 2) * 23; x < 460; x += 46) dots += `<circle cx="${x}" cy="${y}" r="7"/>`;
  }
  return svg(
    500,
    800,
    `
  <defs>
    ${cylinder('navy', '#182447', '#31457a')}
    <clipPath id="dress"><path id="shape" d="M200 60 Q250 100 300 60 L330 64 L352 120 L334 230 L318 300 Q420 520 450 740 L50 740 Q80 520 182 300 L166 230 L148 120 L170 64 Z"/></clipPath>
  </defs>
  <rect width="500" height="800" fill="#ffffff"/>
  <g clip-path="url(#dress)">
    <rect width="500" height="800" fill="url(#navy)"/>
    <g fill="#f2f2f5">${dots}</g>
    <path d="M170 300 L330 300 L330 316 L170 316 Z" fill="#0f1a36"/>
    <path d="M200 330 Q170 520 120 740 M250 330 L250 740 M300 330 Q330 520 380 740" stroke="#000" stroke-width="10" opacity="0.18" fill="none"/>
  </g>`,
  );
}

/** A dusty-pink bralette with straps, on white. */
function braletteSvg() {
  return svg(
    600,
    420,
    `
  <defs>${cylinder('pink', '#b96f7d', '#e7a9b5')}</defs>
  <rect width="600" height="420" fill="#ffffff"/>
  <path d="M196 70 L204 70 L226 200 L216 202 Z M396 70 L404 70 L384 202 L374 200 Z" fill="#a85f6d"/>
  <path d="M162 270 Q170 190 214 150 Q262 170 298 246 L302 246 Q338 170 386 150 Q430 190 438 270 Z" fill="url(#pink)"/>
  <path d="M214 152 Q250 190 296 244 M386 152 Q350 190 304 244" stroke="#a85f6d" stroke-width="4" fill="none"/>
  <path d="M158 262 L442 262 L440 300 L160 300 Z" fill="#c27f8c"/>
  <path d="M160 270 L440 270 M160 292 L440 292" stroke="#f3d4da" stroke-width="2" stroke-dasharray="6 4"/>`,
  );
}

/** An empty room: back wall with a window and a picture, side walls, ceiling, a wooden floor in perspective. */
function roomSvg() {
  const vp = { x: 400, y: 225 };
  let planks = '';
  for (let i = 0; i <= 14; i++) {
    const xb = 170 + (i * 460) / 14;
    const xBottom = vp.x + ((xb - vp.x) * (600 - vp.y)) / (360 - vp.y);
    planks += `<path d="M${xb.toFixed(1)} 360 L${xBottom.toFixed(1)} 600"/>`;
  }
  for (const y of [378, 402, 434, 478, 540]) planks += `<path d="M0 ${y} L800 ${y}" opacity="0.35"/>`;
  return svg(
    800,
    600,
    `
  <defs>
    <linearGradient id="wall" x1="0" x2="1"><stop offset="0" stop-color="#e9dfcd"/><stop offset="0.7" stop-color="#f1e9db"/><stop offset="1" stop-color="#e3d8c4"/></linearGradient>
    <linearGradient id="floor" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#9c7049"/><stop offset="1" stop-color="#b98a5e"/></linearGradient>
    <linearGradient id="sky" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#8fc1e8"/><stop offset="1" stop-color="#d7ecf7"/></linearGradient>
    <clipPath id="floorClip"><path d="M170 360 L630 360 L800 600 L0 600 Z"/></clipPath>
  </defs>
  <path d="M0 0 L800 0 L630 90 L170 90 Z" fill="#f6f2ea"/>
  <path d="M0 0 L170 90 L170 360 L0 600 Z" fill="#d8cbb4"/>
  <path d="M800 0 L630 90 L630 360 L800 600 Z" fill="#ddd0ba"/>
  <rect x="170" y="90" width="460" height="270" fill="url(#wall)"/>
  <path d="M170 360 L630 360 L800 600 L0 600 Z" fill="url(#floor)"/>
  <g clip-path="url(#floorClip)" stroke="#6e4b2e" stroke-width="1.5" fill="none">${planks}</g>
  <rect x="170" y="348" width="460" height="12" fill="#faf8f3"/>
  <path d="M170 348 L170 360 L0 600 L0 578 Z" fill="#efebe2"/>
  <path d="M630 348 L630 360 L800 600 L800 578 Z" fill="#f2eee6"/>
  <rect x="470" y="140" width="110" height="150" fill="#fbfaf7"/>
  <rect x="478" y="148" width="94" height="134" fill="url(#sky)"/>
  <path d="M525 148 L525 282 M478 215 L572 215" stroke="#fbfaf7" stroke-width="5"/>
  <rect x="225" y="165" width="110" height="76" fill="#5b4a3a"/>
  <rect x="232" y="172" width="96" height="62" fill="#c9b48f"/>
  <path d="M232 234 L262 196 L284 220 L300 204 L328 234 Z" fill="#7f8f6a"/>
  <circle cx="306" cy="188" r="7" fill="#f1d58c"/>`,
  );
}

/** A teal velvet armchair with wooden legs, on white. */
function armchairSvg() {
  return svg(
    600,
    600,
    `
  <defs>
    <linearGradient id="back" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#3f8c8a"/><stop offset="1" stop-color="#2a6664"/></linearGradient>
    <linearGradient id="seat" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#4fa3a0"/><stop offset="1" stop-color="#2f6f6d"/></linearGradient>
    ${cylinder('arm', '#25605e', '#4a9b98')}
    ${cylinder('wood', '#4a2f1c', '#8a5d3b')}
  </defs>
  <rect width="600" height="600" fill="#ffffff"/>
  <path d="M150 80 Q300 40 450 80 L460 340 L140 340 Z" fill="url(#back)"/>
  <path d="M210 110 L210 320 M300 95 L300 320 M390 110 L390 320" stroke="#24595a" stroke-width="4" opacity="0.5"/>
  <rect x="150" y="300" width="300" height="90" rx="30" fill="url(#seat)"/>
  <rect x="100" y="220" width="80" height="230" rx="36" fill="url(#arm)"/>
  <rect x="420" y="220" width="80" height="230" rx="36" fill="url(#arm)"/>
  <rect x="120" y="380" width="360" height="80" rx="14" fill="#2c6a68"/>
  <path d="M124 456 L476 456" stroke="#1e4c4b" stroke-width="6"/>
  <path d="M140 458 L156 458 L150 540 L144 540 Z M444 458 L460 458 L456 540 L450 540 Z" fill="url(#wood)"/>
  <path d="M190 458 L204 458 L200 520 L194 520 Z M396 458 L410 458 L406 520 L400 520 Z" fill="#3b2616"/>`,
  );
}

/** A tartan swatch. */
function tartanSvg() {
  const bands = [
    { at: 0, size: 70, colour: '#1f5b3a', opacity: 0.85 },
    { at: 110, size: 26, colour: '#a3202a', opacity: 0.9 },
    { at: 170, size: 70, colour: '#1f5b3a', opacity: 0.85 },
    { at: 280, size: 40, colour: '#0d1530', opacity: 0.8 },
    { at: 352, size: 6, colour: '#e8c547', opacity: 0.95 },
  ];
  let stripes = '';
  for (const b of bands) {
    stripes += `<rect x="0" y="${b.at}" width="400" height="${b.size}" fill="${b.colour}" opacity="${b.opacity * 0.6}"/>`;
    stripes += `<rect x="${b.at}" y="0" width="${b.size}" height="400" fill="${b.colour}" opacity="${b.opacity * 0.6}"/>`;
  }
  let twill = '';
  for (let i = -400; i < 400; i += 6) twill += `<path d="M${i} 400 L${i + 400} 0"/>`;
  return svg(
    400,
    400,
    `
  <rect width="400" height="400" fill="#b7323a"/>
  ${stripes}
  <g stroke="#000" stroke-width="1.5" opacity="0.12">${twill}</g>`,
  );
}

/** A greige three-seat sofa on a plain light backdrop, with soft shading, creases and a faint floor shadow. */
function sofaSvg() {
  return svg(
    800,
    500,
    `
  <defs>
    <linearGradient id="bg" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#f2f2f0"/><stop offset="1" stop-color="#e6e6e3"/></linearGradient>
    <linearGradient id="cushion" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#cbbfac"/><stop offset="0.6" stop-color="#b3a692"/><stop offset="1" stop-color="#8f8370"/></linearGradient>
    <linearGradient id="seat" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#d2c7b5"/><stop offset="1" stop-color="#9c907c"/></linearGradient>
    ${cylinder('arm', '#8c806c', '#c6baa6')}
    <linearGradient id="base" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#9e927e"/><stop offset="1" stop-color="#766b5a"/></linearGradient>
  </defs>
  <rect width="800" height="500" fill="url(#bg)"/>
  <ellipse cx="400" cy="430" rx="330" ry="14" fill="#c4c4bf" opacity="0.55"/>
  <rect x="120" y="110" width="560" height="190" rx="26" fill="#a89c88"/>
  <rect x="140" y="125" width="170" height="170" rx="22" fill="url(#cushion)"/>
  <rect x="315" y="125" width="170" height="170" rx="22" fill="url(#cushion)"/>
  <rect x="490" y="125" width="170" height="170" rx="22" fill="url(#cushion)"/>
  <rect x="130" y="270" width="540" height="80" rx="18" fill="url(#seat)"/>
  <path d="M312 276 L312 348 M488 276 L488 348" stroke="#766b5a" stroke-width="4" opacity="0.7"/>
  <rect x="130" y="340" width="540" height="66" rx="10" fill="url(#base)"/>
  <rect x="70" y="190" width="90" height="216" rx="40" fill="url(#arm)"/>
  <rect x="640" y="190" width="90" height="216" rx="40" fill="url(#arm)"/>
  <path d="M100 406 L118 406 L114 432 L104 432 Z M682 406 L700 406 L696 432 L686 432 Z" fill="#4a3322"/>`,
  );
}

/** A lake landscape; made dull (low contrast, washed-out colours, a little soft) like a hazy phone photo. */
async function dullLandscape() {
  let trees = '';
  for (let i = 0; i < 18; i++) {
    const x = 20 + i * 46 + ((i * 37) % 17);
    const h = 60 + ((i * 53) % 40);
    trees += `<path d="M${x} ${330 - h} L${x + 22} 332 L${x - 22} 332 Z"/>`;
  }
  const clean = svg(
    800,
    533,
    `
  <defs>
    <linearGradient id="sky" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#3f7fc4"/><stop offset="1" stop-color="#bcd8ee"/></linearGradient>
    <linearGradient id="lake" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#5d8fb7"/><stop offset="1" stop-color="#24496b"/></linearGradient>
    <linearGradient id="grass" x1="0" x2="0" y1="0" y2="1"><stop offset="0" stop-color="#6f9f3a"/><stop offset="1" stop-color="#3d6b22"/></linearGradient>
  </defs>
  <rect width="800" height="533" fill="url(#sky)"/>
  <circle cx="640" cy="90" r="36" fill="#fff6d5"/>
  <ellipse cx="200" cy="110" rx="90" ry="22" fill="#ffffff" opacity="0.8"/>
  <ellipse cx="260" cy="96" rx="60" ry="20" fill="#ffffff" opacity="0.85"/>
  <path d="M0 300 L120 170 L210 250 L330 140 L470 270 L560 190 L700 280 L800 220 L800 320 L0 320 Z" fill="#6d7f99"/>
  <path d="M330 140 L360 168 L345 170 L330 160 L312 172 L300 168 Z" fill="#f4f6fa"/>
  <path d="M0 320 Q200 280 400 310 Q600 340 800 300 L800 345 L0 345 Z" fill="url(#grass)"/>
  <g fill="#244a25">${trees}</g>
  <rect y="340" width="800" height="193" fill="url(#lake)"/>
  <path d="M0 470 Q200 440 420 480 Q600 510 800 470 L800 533 L0 533 Z" fill="#7a8f45"/>
  <path d="M60 380 L200 380 M420 410 L600 410 M250 440 L330 440" stroke="#d7e6f2" stroke-width="2" opacity="0.6"/>`,
  );
  return sharp(clean).blur(0.9).linear(0.6, 62).modulate({ saturation: 0.68 }).jpeg(JPEG).toBuffer();
}

const jpeg = (input) => sharp(input).flatten({ background: '#ffffff' }).jpeg(JPEG).toBuffer();

// ---------------------------------------------------------------------------------------------------------
// Examples
// ---------------------------------------------------------------------------------------------------------

const person = await jpeg(personSvg());
const tshirt = await jpeg(tshirtSvg());
const drawn = [
  {
    dir: 'fashion_swap',
    tool: 'fashion_swap',
    type: 'fashion_swap_full',
    inputs: { clothes: await jpeg(dressSvg()), person: await jpeg(personSvg('base')) },
    says: 'A dress keyed off white and fitted from the shoulders to below the knees (the garment has no legs and is long, so the full swap treats it as a dress).',
  },
  {
    dir: 'fashion_swap_half-upper',
    tool: 'fashion_swap_half',
    type: 'upper',
    inputs: { clothes: tshirt, person },
    says: 'A t-shirt keyed off white and fitted to the torso (shoulders to hips), with a soft shadow.',
  },
  {
    dir: 'fashion_swap_half-lower',
    tool: 'fashion_swap_half',
    type: 'lower',
    inputs: { clothes: await jpeg(trousersSvg()), person },
    says: 'Chinos keyed off white and fitted from the waist to the ankles, over the jeans.',
  },
  {
    dir: 'lengerie',
    tool: 'lengerie',
    type: 'lengerie_swap',
    inputs: { clothes: await jpeg(braletteSvg()), person: await jpeg(personSvg('base')) },
    says: 'A bralette fitted close to the chest, straps at the shoulders.',
  },
  {
    dir: 'fashion_card',
    tool: 'fashion_card',
    type: 'product_card',
    inputs: { clothes: tshirt },
    says: 'The t-shirt cut out and centred on a 1024x1280 light card with margins and a soft drop shadow.',
  },
  {
    dir: 'furniture',
    tool: 'furniture',
    type: 'furniture_placement',
    inputs: { room: await jpeg(roomSvg()), furniture: await jpeg(armchairSvg()) },
    says: 'The armchair cut out, scaled to 40% of the room width and stood on the floor with a contact shadow.',
  },
  {
    dir: 'fabric',
    tool: 'fabric',
    type: 'fabric_retexture',
    inputs: { fabric: await jpeg(tartanSvg()), target: await jpeg(sofaSvg()) },
    says: 'The sofa re-covered in the tartan, keeping its cushions, creases and shading; the backdrop is untouched.',
  },
  {
    dir: 'default',
    tool: 'default',
    type: 'enhance',
    inputs: { image: await dullLandscape() },
    texts: { prompt: 'make it pop' },
    says: 'A hazy, flat photo with levels stretched, colours lifted a little and gently sharpened.',
  },
];

/** A photo of test/fixtures/photos (licences in its README), as a JPEG like the other inputs. */
const photo = async (file) => jpeg(await readFile(path.join(root, 'test/fixtures/photos', file)));
const astronaut = await photo('astronaut.jpg');
const photos = [
  {
    dir: 'photo-fashion_swap_half-upper',
    tool: 'fashion_swap_half',
    type: 'upper',
    inputs: { clothes: tshirt, person: astronaut },
    says: 'A portrait on a busy background: the t-shirt fitted to the shoulders the pose model found, under her face and hair, which stay as they were, as does the background away from her.',
  },
  {
    dir: 'photo-fashion_swap-refused',
    tool: 'fashion_swap',
    type: 'fashion_swap_full',
    inputs: { clothes: await jpeg(dressSvg()), person: astronaut },
    says: 'The full try-on needs the whole figure; on a head-to-waist portrait the job ends `unsupported_input`, saying which photo works.',
  },
  {
    dir: 'photo-fashion_swap_half-no-person',
    tool: 'fashion_swap_half',
    type: 'upper',
    inputs: { clothes: tshirt, person: await photo('chelsea.png') },
    says: 'A cat is not a person: `no_person_found`.',
  },
  {
    dir: 'photo-furniture-refused',
    tool: 'furniture',
    type: 'furniture_placement',
    inputs: { room: await jpeg(roomSvg()), furniture: await photo('coffee.png') },
    says: 'A cup on a wooden table cannot be cut out of its background: `unsupported_input`, naming the input and what works.',
  },
  {
    dir: 'photo-default',
    tool: 'default',
    type: 'enhance',
    inputs: { image: await photo('coffee.png') },
    says: 'The enhance tool on a real photo: levels stretched, colours lifted a little, gently sharpened.',
  },
];

const engine = new LocalEngine();
await rm(outRoot, { recursive: true, force: true });
let readme = `# Local engine examples

Generated by \`node scripts/make-examples.mjs\` with the \`local\` engine (\`src/engines/local\`). Each folder
holds the inputs (\`input-<name>.jpg\`) and the engine's \`output.jpg\` or, where the engine refuses the input,
\`error.json\`: the \`error\` of the history item the client reads.

`;
const table = `| Example | Tool / type | What it shows |
| --- | --- | --- |
`;
readme += `## Drawn inputs\n\nSynthetic inputs, drawn as SVG in the script.\n\n${table}`;
readme += await render(drawn);
readme += `\n## Real photos\n\nPhotographs from \`test/fixtures/photos\` (licences in its README), with drawn garments.\n\n${table}`;
readme += await render(photos);
await writeFile(path.join(outRoot, 'README.md'), readme);

async function render(examples) {
  let rows = '';
  for (const example of examples) {
    const dir = path.join(outRoot, example.dir);
    await mkdir(dir, { recursive: true });
    for (const [name, data] of Object.entries(example.inputs)) {
      await writeFile(path.join(dir, `input-${name}.jpg`), data);
    }
    const started = performance.now();
    const request = {
      tool: example.tool,
      generationType: example.type,
      images: example.inputs,
      texts: example.texts ?? {},
    };
    const result = await engine.generate(request).catch((error) => {
      if (!error.code) throw error;
      return { error: { code: error.code, message: error.message } };
    });
    const ms = performance.now() - started;
    let shown;
    if (result.error) {
      await writeFile(path.join(dir, 'error.json'), `${JSON.stringify(result.error, null, 2)}\n`);
      shown = `${example.dir}/error.json`;
      console.log(`${example.dir.padEnd(34)} ${result.error.code}  ${ms.toFixed(0)} ms`);
    } else {
      const output = await sharp(result.data, {
        raw: { width: result.width, height: result.height, channels: result.channels },
      })
        .jpeg(JPEG)
        .toBuffer();
      await writeFile(path.join(dir, 'output.jpg'), output);
      shown = `${example.dir}/output.jpg`;
      console.log(`${example.dir.padEnd(34)} ${result.width}x${result.height}  ${ms.toFixed(0)} ms`);
    }
    const inputs = Object.keys(example.inputs)
      .map((name) => `[${name}](${example.dir}/input-${name}.jpg)`)
      .join(', ');
    rows += `| [${example.dir}](${shown}) | \`${example.tool}\` / \`${example.type}\` | ${example.says} Inputs: ${inputs}. |\n`;
  }
  return rows;
}
