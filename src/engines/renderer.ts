import sharp, { type Sharp } from 'sharp';
import { type EngineImage, PermanentEngineError, type RenderedOutputs } from './engine.js';
import { isPlainJpeg } from './plain-image.js';

/** The preview's long side. */
export const PREVIEW_MAX_SIDE = 512;

/**
 * Encodes an engine's result once into the two files clients download, decoding an encoded one of at most
 * `limitInputPixels` (OUTPUT_MAX_PIXELS for a model server's result).
 */
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

function cannotEncode(error: unknown): PermanentEngineError {
  return new PermanentEngineError(
    'engine_failed',
    `the engine's result could not be encoded: ${(error as Error).message}`,
  );
}
