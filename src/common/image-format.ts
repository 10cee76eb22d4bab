/** The image formats the service accepts and makes. */
export type ImageFormat = 'jpeg' | 'png' | 'webp';

export const IMAGE_MIME_TYPES: Readonly<Record<ImageFormat, string>> = {
  jpeg: 'image/jpeg',
  png: 'image/png',
  webp: 'image/webp',
};

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/**
 * The format of JPEG, PNG or WebP bytes by their magic numbers (the first 12 bytes suffice), never by a file name
 * or a declared type; `undefined` for anything else.
 *
 * Not file-type: it is asynchronous (this runs for every upload of every job creation, and inside the engines'
 * synchronous data URIs), tries a few hundred formats through a tokenizer, which measured tens of times slower per
 * call on the same heads, and it tells apart what the service takes as one format (an animated PNG is `apng`).
 * Three fixed signatures need no library.
 */
export function imageFormatOf(head: Uint8Array): ImageFormat | undefined {
  const bytes = Buffer.from(head.buffer, head.byteOffset, head.byteLength);
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'jpeg';
  if (bytes.length >= 8 && bytes.subarray(0, 8).equals(PNG_SIGNATURE)) return 'png';
  if (bytes.length >= 12 && bytes.toString('latin1', 0, 4) === 'RIFF' && bytes.toString('latin1', 8, 12) === 'WEBP') {
    return 'webp';
  }
  return undefined;
}
