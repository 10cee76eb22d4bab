import { readFile } from 'node:fs/promises';
import sharp from 'sharp';
import { findTool } from '../../src/catalog/catalog.js';
import type { FormValue } from './client.js';

/** A real image of the given size and format, with some structure so engines have edges to work on. */
export async function makeImage(
  width: number,
  height: number,
  format: 'png' | 'jpeg' | 'webp' = 'png',
  color = '#3a6ea5',
): Promise<Buffer> {
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}">
    <rect width="100%" height="100%" fill="#f4f4f4"/>
    <rect x="${width * 0.25}" y="${height * 0.2}" width="${width * 0.5}" height="${height * 0.6}" fill="${color}"/>
  </svg>`;
  return sharp(Buffer.from(svg))[format]().toBuffer();
}

/**
 * The JPEG with comment segments of `bytes` in all right after its start marker, as cameras put large
 * metadata there: its header (the frame's size) then starts that far into the file.
 */
export function withLeadingMetadata(jpeg: Buffer, bytes: number): Buffer {
  const segments: Buffer[] = [];
  for (let left = bytes; left > 0; left -= 60_000) {
    const length = Math.min(left, 60_000);
    const segment = Buffer.alloc(4 + length, 0x20);
    segment.writeUInt16BE(0xfffe, 0); // COM
    segment.writeUInt16BE(2 + length, 2);
    segments.push(segment);
  }
  return Buffer.concat([jpeg.subarray(0, 2), ...segments, jpeg.subarray(2)]);
}

/** Width and height of {@link makePerson}'s figure. */
export const PERSON_SIZE = { width: 600, height: 800 };

/**
 * A person the person tools find (a plain rectangle is no person): the drawn 600x800 figure of the examples, standing
 * on a plain backdrop. `grain` overlays sensor-like noise, so the file is as large as a photo's.
 */
export async function makePerson(format: 'png' | 'jpeg' | 'webp' = 'jpeg', { grain = false } = {}): Promise<Buffer> {
  let figure = sharp(await readFile('docs/examples/fashion_swap/input-person.jpg'));
  if (grain) {
    const noise = await sharp({
      create: { ...PERSON_SIZE, channels: 3, background: '#808080', noise: { type: 'gaussian', mean: 128, sigma: 30 } },
    })
      .png()
      .toBuffer();
    figure = figure.composite([{ input: noise, blend: 'soft-light' }]);
  }
  // Grain is kept at a photo's quality (at the default 80 a WebP smooths most of it away).
  if (format === 'png') return figure.png().toBuffer();
  return figure[format]({ quality: grain ? 90 : 80 }).toBuffer();
}

/** The names of the tool's image inputs, in the catalog's order. */
export function imageInputsOf(tool: string): string[] {
  const found = findTool(tool);
  if (!found) throw new Error(`no tool ${tool} in the catalog`);
  return found.inputs.filter((input) => input.kind === 'image').map((input) => input.name);
}

/** The images each tool needs, small and valid. */
export async function inputsFor(tool: string): Promise<Record<string, FormValue>> {
  const image = async (color: string) => ({ data: await makeImage(320, 400, 'png', color), contentType: 'image/png' });
  const person = async () => ({ data: await makePerson(), contentType: 'image/jpeg' });
  const colors = ['#a53a3a', '#3a6ea5'];
  const fields: Record<string, FormValue> = { tool };
  for (const [index, name] of imageInputsOf(tool).entries()) {
    fields[name] = name === 'person' ? await person() : await image(colors[index % 2]);
  }
  return fields;
}
