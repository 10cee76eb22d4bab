import { MediaUrls } from '../../src/media/media-urls.js';

export type ResultFile = 'preview.webp' | 'stock.jpg';

/**
 * A result's path signed as the service signs it, with the MEDIA_SIGNING_KEY of `serviceEnv`, valid for an hour: for
 * reading the media of an item the test made by other means than the API (seeded rows, a deleted item's paths).
 */
export function signedMediaPath(serviceEnv: Record<string, string>, id: string, file: ResultFile): string {
  const urls = new MediaUrls(serviceEnv.MEDIA_SIGNING_KEY, undefined, 3_600_000, '');
  return urls.sign(`media/${id}/${file}`, urls.expiresFrom(Date.now()));
}

/** The signed relative path of one of an item's results, as the API writes it. */
export function signedPathOf(id: string, file: ResultFile): RegExp {
  return new RegExp(`^media/${id}/${file.replace('.', '\\.')}\\?expires=\\d+&signature=[A-Za-z0-9_-]{43}$`);
}

/** A media URL without its query: the same for every signing of one result. */
export function unsigned(url: string): string {
  return url.split('?')[0];
}

interface ItemUrls {
  preview_url: string | null;
  stock_url: string | null;
  output_url: string | null;
  media_urls_expire_at: string | null;
  outputs?: { preview_url: string; stock_url: string; output_url: string; seed: number | null }[] | null;
}

/** An item with its media URLs unsigned and without their expiry: what two reads of an unchanged item share. */
export function unsignedItem<T extends ItemUrls>(item: T): Omit<T, 'media_urls_expire_at'> {
  const rest: Omit<T, 'media_urls_expire_at'> & Partial<ItemUrls> = { ...item };
  delete rest.media_urls_expire_at;
  const strip = (url: string | null) => (url === null ? null : unsigned(url));
  return {
    ...rest,
    preview_url: strip(item.preview_url),
    stock_url: strip(item.stock_url),
    output_url: strip(item.output_url),
    ...(item.outputs !== undefined && {
      outputs:
        item.outputs?.map((output) => ({
          ...output,
          preview_url: unsigned(output.preview_url),
          stock_url: unsigned(output.stock_url),
          output_url: unsigned(output.output_url),
        })) ?? null,
    }),
  };
}
