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
const APP14 = 0xee;
/**
 * The segments of the image itself: baseline, extended and progressive frames, Huffman and quantization tables,
 * restart interval, scans, and Adobe's colour transform (APP14). The two application segments are taken only as
 * exactly what they are, with room for nothing else: JFIF's APP0 without a thumbnail, Adobe's APP14 of 12 bytes.
 */
const IMAGE_SEGMENTS = new Set([0xc0, 0xc1, 0xc2, 0xc4, 0xdb, 0xdd, SOS, APP0, APP14]);
/** Each application segment allowed: its length field, and the identifier its data starts with. */
const PLAIN_APPLICATION_SEGMENTS = new Map([
  [APP0, { length: 16, id: Buffer.from('JFIF\0', 'latin1') }],
  [APP14, { length: 14, id: Buffer.from('Adobe', 'latin1') }],
]);

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
    const application = PLAIN_APPLICATION_SEGMENTS.get(marker);
    if (application) {
      const id = data.subarray(at + 4, at + 4 + application.id.length);
      if (length !== application.length || !id.equals(application.id)) return false;
    }
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
