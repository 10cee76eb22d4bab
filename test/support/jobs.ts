import sharp from 'sharp';

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

export type FormValue = string | { data: Buffer; filename?: string; contentType?: string };

/** POSTs a job as a browser would, with multipart/form-data built by fetch itself. */
export function postJob(
  baseUrl: string,
  apiKey: string | undefined,
  fields: Record<string, FormValue>,
  headers: Record<string, string> = {},
  path = '/generation/generate_image_v2/',
): Promise<Response> {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) {
    if (typeof value === 'string') form.append(name, value);
    else
      form.append(
        name,
        new Blob([value.data], { type: value.contentType ?? 'application/octet-stream' }),
        value.filename ?? `${name}.bin`,
      );
  }
  return fetch(`${baseUrl}${path}`, {
    method: 'POST',
    body: form,
    headers: { ...(apiKey ? { Authorization: `Bearer ${apiKey}` } : {}), ...headers },
  });
}

/** The images each tool needs, small and valid. */
export async function inputsFor(tool: string): Promise<Record<string, FormValue>> {
  const image = async (color: string) => ({ data: await makeImage(320, 400, 'png', color), contentType: 'image/png' });
  const inputs: Record<string, string[]> = {
    fashion_swap: ['clothes', 'person'],
    fashion_swap_half: ['clothes', 'person'],
    fashion_card: ['clothes'],
    lengerie: ['clothes', 'person'],
    furniture: ['room', 'furniture'],
    fabric: ['fabric', 'target'],
    default: ['image'],
  };
  const colors = ['#a53a3a', '#3a6ea5'];
  const fields: Record<string, FormValue> = { tool };
  for (const [index, name] of (inputs[tool] ?? []).entries()) fields[name] = await image(colors[index % 2]);
  return fields;
}

export interface HistoryItemBody {
  history_item_id: string;
  status: 'pending' | 'complete' | 'error';
  preview_url: string | null;
  stock_url: string | null;
  output_url: string | null;
  error: { code: string; message: string } | null;
  like: boolean | null;
  [field: string]: unknown;
}

/** Polls the item until its status is final (or the deadline passes), as a client would. */
export async function waitForFinal(
  baseUrl: string,
  apiKey: string,
  id: string,
  timeoutMs = 30_000,
): Promise<HistoryItemBody> {
  const deadline = Date.now() + timeoutMs;
  let last: HistoryItemBody | undefined;
  while (Date.now() < deadline) {
    const response = await fetch(`${baseUrl}/user/generation-history/${id}`, {
      headers: { Authorization: `Bearer ${apiKey}` },
    });
    if (response.status === 200) {
      last = (await response.json()) as HistoryItemBody;
      if (last.status !== 'pending') return last;
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`item ${id} still not final after ${timeoutMs} ms: ${JSON.stringify(last)}`);
}
