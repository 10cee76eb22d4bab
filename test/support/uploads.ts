import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createDeflate, crc32 } from 'node:zlib';
import type { FormValue } from './client.js';

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A file part as a browser sends it. */
export function file(data: Buffer, filename: string, contentType: string): FormValue {
  return { data, filename, contentType };
}

/**
 * A complete, valid 8-bit greyscale PNG of the given size whose pixels are all black. Its rows are
 * deflated as a stream, so a 20000x20000 "bomb" costs a few hundred KiB and about a second to make.
 */
export async function blackPng(width: number, height: number): Promise<Buffer> {
  const deflate = createDeflate({ level: 9 });
  const compressed: Buffer[] = [];
  deflate.on('data', (chunk: Buffer) => compressed.push(chunk));
  const ended = new Promise<void>((resolve, reject) => {
    deflate.on('end', resolve);
    deflate.on('error', reject);
  });
  // Each row: filter byte 0, then `width` zero bytes; written in batches of rows.
  const rowsPerBatch = Math.max(1, Math.floor((1 << 20) / (width + 1)));
  const batch = Buffer.alloc(rowsPerBatch * (width + 1));
  for (let row = 0; row < height; row += rowsPerBatch) {
    const rows = Math.min(rowsPerBatch, height - row);
    if (!deflate.write(batch.subarray(0, rows * (width + 1)))) {
      await new Promise((resolve) => deflate.once('drain', resolve));
    }
  }
  deflate.end();
  await ended;

  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8; // bit depth
  header[9] = 0; // colour type: greyscale
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', header),
    pngChunk('IDAT', Buffer.concat(compressed)),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

function pngChunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const typeAndData = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(typeAndData) >>> 0);
  return Buffer.concat([length, typeAndData, crc]);
}

/** Every file below `dir` (relative paths); none when the directory does not exist. */
export async function filesUnder(dir: string): Promise<string[]> {
  try {
    const entries = await readdir(dir, { recursive: true, withFileTypes: true });
    return entries
      .filter((entry) => !entry.isDirectory())
      .map((entry) => join(entry.parentPath, entry.name).slice(dir.length + 1));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}

/** The items that have inputs stored, by id: each input file is named `inputKey(id, name)`, after its item's UUID. */
export async function itemsWithInputs(inputRoot: string): Promise<Set<string>> {
  return new Set((await filesUnder(inputRoot)).map((path) => path.slice(0, UUID_LENGTH)));
}

const UUID_LENGTH = 36;

/** The highest resident set size the process has had so far (Linux), in bytes. */
export async function peakRssBytes(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const match = /^VmHWM:\s+(\d+) kB$/m.exec(status);
  if (!match) throw new Error(`no VmHWM in /proc/${pid}/status`);
  return Number(match[1]) * 1024;
}

/** Seconds of a `Retry-After` header, which must be a whole number of seconds. */
export function retryAfterSeconds(response: Response): number {
  const value = response.headers.get('retry-after') ?? '';
  expect(value).toMatch(/^\d+$/);
  return Number(value);
}
