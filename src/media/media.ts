/** The two result files of a job, at fixed keys so a job that runs twice writes the same places. */
const OUTPUT_FILES = {
  preview: { name: 'preview.webp', contentType: 'image/webp' },
  stock: { name: 'stock.jpg', contentType: 'image/jpeg' },
} as const;

export type OutputKind = keyof typeof OUTPUT_FILES;

/**
 * Results never change once written (fixed keys, one outcome per job), so every cache may keep them for a year:
 * sent by the /media route, and stored on S3 objects for a CDN or the bucket to send.
 */
export const MEDIA_CACHE_CONTROL = 'public, max-age=31536000, immutable';

/** The first segment of every media path; on S3 also the media store's prefix, so an object's key is its path. */
export const MEDIA_PREFIX = 'media/';

const CONTENT_TYPES = new Map<string, string>(Object.values(OUTPUT_FILES).map((file) => [file.name, file.contentType]));

/** Content-Type of an output file by its name; undefined for any other name. */
export function outputContentType(fileName: string): string | undefined {
  return CONTENT_TYPES.get(fileName);
}

/** Key of an output inside the media store. */
export function outputKey(itemId: string, kind: OutputKind): string {
  return `${itemId}/${OUTPUT_FILES[kind].name}`;
}

/** The relative media path clients resolve against the base URL, e.g. `media/{id}/preview.webp`. */
export function mediaPath(itemId: string, kind: OutputKind): string {
  return `${MEDIA_PREFIX}${outputKey(itemId, kind)}`;
}

/**
 * Key of an uploaded input inside the private input store. Flat, without a folder per item: creating a
 * directory is the costliest file system step of accepting a job, and the row keeps each input's key for
 * reading and deleting it.
 */
export function inputKey(itemId: string, inputName: string): string {
  return `${itemId}-${inputName}`;
}

const INPUT_KEY = /^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-[^/]+$/;

/** The item an input's key belongs to; undefined for a key that is not an input's. */
export function itemIdOfInputKey(key: string): string | undefined {
  return INPUT_KEY.exec(key)?.[1];
}

export const INPUT_STORE = Symbol('INPUT_STORE');
export const MEDIA_STORE = Symbol('MEDIA_STORE');
