/** The two result files of a job, at fixed keys so a job that runs twice writes the same places. */
const OUTPUT_FILES = {
  preview: { name: 'preview.webp', contentType: 'image/webp' },
  stock: { name: 'stock.jpg', contentType: 'image/jpeg' },
} as const;

export type OutputKind = keyof typeof OUTPUT_FILES;

/** The longest any cache may keep a result the /media route sent: a delete must reach clients within it. */
export const MEDIA_URL_MAX_AGE_SECONDS = 3600;

/**
 * Stored on S3 objects, for a CDN or public bucket that serves them straight (MEDIA_PUBLIC_BASE_URL, the operator's
 * choice of public results): a shared cache may then keep a deleted result for at most this hour. Presigned GETs and
 * the /media route send their own, private, Cache-Control.
 */
export const STORED_MEDIA_CACHE_CONTROL = `public, max-age=${MEDIA_URL_MAX_AGE_SECONDS}`;

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
