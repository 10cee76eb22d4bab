import sharp, { type Sharp } from 'sharp';
import { type EngineImage, PermanentEngineError, type RenderedOutputs } from './engine.js';

/** The preview's long side. */
export const PREVIEW_MAX_SIDE = 512;

/** Encodes an engine's result once into the two files clients download. */
export async function renderOutputs(image: EngineImage, limitInputPixels: number): Promise<RenderedOutputs> {
  if (image.kind === 'rendered') return image.outputs;
  if (image.kind === 'encoded' && isPlainJpeg(image.data)) {
    // A model's JPEG is the stock image as it is: encoding it again would cost a worker most of a job's CPU for a
    // slightly worse copy. Only the preview is made.
    return {
      stock: image.data,
      preview: await encodePreview(sharp(image.data, { limitInputPixels, failOn: 'error' })),
    };
  }
  const source =
    image.kind === 'raw'
      ? sharp(image.data, { raw: { width: image.width, height: image.height, channels: image.channels } })
      : sharp(image.data, { limitInputPixels, failOn: 'error' }).rotate();
  // JPEG has no transparency: a remote engine's transparent result is laid on white.
  const flat = source.flatten({ background: '#ffffff' });
  try {
    const [stock, preview] = await Promise.all([
      flat.clone().jpeg({ quality: 90, chromaSubsampling: '4:4:4' }).toBuffer(),
      encodePreview(flat.clone()),
    ]);
    return { stock, preview };
  } catch (error) {
    throw cannotEncode(error);
  }
}

async function encodePreview(image: Sharp): Promise<Buffer> {
  try {
    return await image
      .resize(PREVIEW_MAX_SIDE, PREVIEW_MAX_SIDE, { fit: 'inside', withoutEnlargement: true })
      // Effort 2 of 6 encodes a preview in half the time of the default 4, for files about a tenth larger
      // (effort 3 is as slow as 4): the preview is on every job's path to complete.
      .webp({ quality: 80, effort: 2 })
      .toBuffer();
  } catch (error) {
    throw cannotEncode(error);
  }
}

/** JPEG markers (ITU T.81, JFIF) a file may have whose bytes are served as they are. */
const SOI = 0xd8;
const EOI = 0xd9;
const SOS = 0xda;
const APP0 = 0xe0;
/**
 * The segments of the image itself: baseline, extended and progressive frames, Huffman and quantization tables,
 * restart interval, scans, and Adobe's colour transform (APP14). JFIF's APP0 is taken without a thumbnail.
 */
const IMAGE_SEGMENTS = new Set([0xc0, 0xc1, 0xc2, 0xc4, 0xdb, 0xdd, SOS, APP0, 0xee]);
/** JFIF's APP0 without a thumbnail: its length field, and the identifier that starts it. */
const JFIF_PLAIN_LENGTH = 16;
const JFIF_ID = Buffer.from('JFIF\0', 'latin1');

/**
 * A JPEG with nothing but its image, so that serving its bytes as they are shows what re-encoding would and tells
 * no more: no EXIF (an orientation to apply, a place or a camera), XMP, IPTC, ICC profile, comment or thumbnail, and
 * nothing after its end (a second image, a phone's trailer). Read marker by marker, through the scans' data.
 */
function isPlainJpeg(data: Buffer): boolean {
  if (data[0] !== 0xff || data[1] !== SOI) return false;
  let at = 2;
  while (at + 1 < data.length) {
    if (data[at] !== 0xff) return false;
    const marker = data[at + 1];
    if (marker === 0xff) {
      at++; // a fill byte before a marker
      continue;
    }
    if (marker === EOI) return at + 2 === data.length;
    if (!IMAGE_SEGMENTS.has(marker) || at + 4 > data.length) return false;
    const length = data.readUInt16BE(at + 2);
    if (marker === APP0 && (length !== JFIF_PLAIN_LENGTH || !data.subarray(at + 4, at + 9).equals(JFIF_ID)))
      return false;
    at += 2 + length;
    if (marker === SOS) {
      const next = nextMarker(data, at);
      if (next < 0) return false;
      at = next;
    }
  }
  return false;
}

/** Where a scan's entropy-coded data ends: the next 0xFF that is not a stuffed 0x00, a restart marker or a fill. */
function nextMarker(data: Buffer, from: number): number {
  for (let at = data.indexOf(0xff, from); at >= 0 && at + 1 < data.length; at = data.indexOf(0xff, at + 1)) {
    const following = data[at + 1];
    if (following !== 0x00 && following !== 0xff && (following < 0xd0 || following > 0xd7)) return at;
  }
  return -1;
}

function cannotEncode(error: unknown): PermanentEngineError {
  return new PermanentEngineError(
    'engine_failed',
    `the engine's result could not be encoded: ${(error as Error).message}`,
  );
}
