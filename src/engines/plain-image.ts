import sharp, { type Metadata } from 'sharp';
import { PermanentEngineError } from './engine.js';

/**
 * A person's photo as a model server gets it: upright, and with nothing but its pixels. A phone's photo tells where and
 * with what it was taken (EXIF, XMP, IPTC), which a model server, often a hosted one, has no use for. It is also often
 * stored sideways with an EXIF orientation, which most models' Python code (PIL's `Image.open`) does not apply: the
 * model would see, and draw, the person lying down. An image with none of that, in RGB or grey, goes as it is; any
 * other is turned upright, converted to sRGB and encoded again in its own format, at a quality that leaves nothing to
 * see. Anything sharp cannot read is the job's `invalid_image`.
 */
export async function plainImage(data: Buffer, name: string, limitInputPixels: number): Promise<Buffer> {
  try {
    const metadata = await sharp(data, { limitInputPixels }).metadata();
    // A CMYK JPEG may hold nothing but its pixels, yet PIL opens it with four channels, which a model does not take.
    const plain =
      metadata.format === 'jpeg'
        ? isPlainJpeg(data) && metadata.space !== 'cmyk'
        : !carriesMetadata(metadata) && endsAtItsEnd(data, metadata.format);
    if (plain) return data;
    const upright = sharp(data, { limitInputPixels, failOn: 'error' }).rotate();
    switch (metadata.format) {
      case 'jpeg':
        return await upright.jpeg({ quality: 95, chromaSubsampling: '4:4:4' }).toBuffer();
      case 'webp':
        return await upright.webp({ quality: 95 }).toBuffer();
      default:
        return await upright.png().toBuffer();
    }
  } catch (error) {
    throw new PermanentEngineError(
      'invalid_image',
      `input image '${name}' could not be decoded: ${(error as Error).message}`,
    );
  }
}

/** Whether a PNG or WebP holds more than its pixels: EXIF (an orientation, a place), XMP, IPTC, a profile, text. */
function carriesMetadata(metadata: Metadata): boolean {
  return (
    Boolean(metadata.exif ?? metadata.xmp ?? metadata.iptc ?? metadata.icc) || (metadata.comments?.length ?? 0) > 0
  );
}

/** A PNG's last chunk, IEND: no data, and its CRC. */
const PNG_END = Buffer.from('0000000049454e44ae426082', 'hex');

/**
 * Whether a PNG or WebP ends where its own structure says (PNG's IEND chunk, the size in WebP's RIFF header), with no
 * bytes after it, which a decoder never reads and a phone or an editor may have put there.
 */
function endsAtItsEnd(data: Buffer, format: string | undefined): boolean {
  if (format === 'png') return data.subarray(-PNG_END.length).equals(PNG_END);
  return format === 'webp' && data.length >= 12 && data.readUInt32LE(4) + 8 === data.length;
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
 * A JPEG with nothing but its image, whose bytes can go out as they are (a model's result served, a photo sent to a
 * model server): they show what re-encoding would and tell no more: no EXIF (an orientation to apply, a place or a camera), XMP, IPTC, ICC profile, comment or thumbnail, and
 * nothing after its end (a second image, a phone's trailer). Read marker by marker, through the scans' data.
 */
export function isPlainJpeg(data: Buffer): boolean {
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
