/** The two result files of a job, at fixed keys so a job that runs twice writes the same places. */
export const OUTPUT_FILES = {
  preview: { name: 'preview.webp', contentType: 'image/webp' },
  stock: { name: 'stock.jpg', contentType: 'image/jpeg' },
} as const;

export type OutputKind = keyof typeof OUTPUT_FILES;

/** Key of an output inside the media store. */
export function outputKey(itemId: string, kind: OutputKind): string {
  return `${itemId}/${OUTPUT_FILES[kind].name}`;
}

/** The relative media path clients resolve against the base URL, e.g. `media/{id}/preview.webp`. */
export function mediaPath(itemId: string, kind: OutputKind): string {
  return `media/${outputKey(itemId, kind)}`;
}

/** Key of an uploaded input inside the private input store. */
export function inputKey(itemId: string, inputName: string): string {
  return `${itemId}/${inputName}`;
}

export const INPUT_STORE = Symbol('INPUT_STORE');
export const MEDIA_STORE = Symbol('MEDIA_STORE');
