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

/** The most results one job has (MAX_OUTPUTS of the routes): output files are named up to it. */
const MOST_OUTPUTS = 4;

/**
 * An output file's name: the first result's as ever (`stock.jpg`), the others' numbered from 1 (`stock-1.jpg` is the
 * second's), all in the item's folder, so that whatever removes the folder removes every result.
 */
function outputFileName(kind: OutputKind, index: number): string {
  const { name } = OUTPUT_FILES[kind];
  if (index === 0) return name;
  const dot = name.lastIndexOf('.');
  return `${name.slice(0, dot)}-${index}${name.slice(dot)}`;
}

const CONTENT_TYPES = new Map<string, string>(
  (Object.keys(OUTPUT_FILES) as OutputKind[]).flatMap((kind) =>
    Array.from({ length: MOST_OUTPUTS }, (_, index) => [outputFileName(kind, index), OUTPUT_FILES[kind].contentType]),
  ),
);

/** Content-Type of an output file by its name; undefined for any other name. */
export function outputContentType(fileName: string): string | undefined {
  return CONTENT_TYPES.get(fileName);
}

/** Key of an output inside the media store: of the job's first result unless `index` says another. */
export function outputKey(itemId: string, kind: OutputKind, index = 0): string {
  return `${itemId}/${outputFileName(kind, index)}`;
}

/** The relative media path clients resolve against the base URL, e.g. `media/{id}/preview.webp`. */
export function mediaPath(itemId: string, kind: OutputKind, index = 0): string {
  return `${MEDIA_PREFIX}${outputKey(itemId, kind, index)}`;
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
