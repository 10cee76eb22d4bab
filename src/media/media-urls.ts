import { createHmac, createSecretKey, type KeyObject, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { keptSecret } from '../common/kept-secret.js';
import type { AppConfig } from '../config/config.js';
import { mediaPath, type OutputKind } from './media.js';

/** What a media URL's `expires` and `signature` say, checked against the keys and the clock. */
export type MediaUrlCheck = 'valid' | 'invalid' | 'expired';

/** The signed URLs of one item's results, and when they stop working. */
export interface SignedMediaUrls {
  preview: string;
  stock: string;
  /** The stock image's absolute URL: MEDIA_PUBLIC_BASE_URL (or PUBLIC_BASE_URL) + its signed path. */
  output: string;
  expiresAt: Date;
}

/** The embedded default's key, kept beside its database (`./data/media-signing-key`). */
const KEPT_KEY_FILE = 'media-signing-key';
const KEPT_KEY = /^[A-Za-z0-9_-]{43}$/;
const EXPIRES = /^\d{1,12}$/;

/**
 * Signed, expiring media URLs (API.md "Media"): `media/{id}/stock.jpg?expires=<unix seconds>&signature=<sig>`, where
 * `sig` is base64url HMAC-SHA256 of `<path>\n<expires>` with MEDIA_SIGNING_KEY. MEDIA_SIGNING_KEY_PREVIOUS still
 * verifies, so replicas can take a new key one at a time. The path is signed without its leading slash, as clients
 * get it.
 */
export class MediaUrls {
  /** As key objects: an HMAC made from one skips reading the key's text each time, and every read signs. */
  private readonly keys: readonly KeyObject[];

  constructor(
    key: string,
    previousKey: string | undefined,
    private readonly ttlMs: number,
    private readonly publicBaseUrl: string,
  ) {
    this.keys = (previousKey ? [key, previousKey] : [key]).map((text) => createSecretKey(text, 'utf8'));
  }

  /** With MEDIA_SIGNING_KEY, or on the embedded default (no DATABASE_URL) with the one kept under its data folder. */
  static async from(config: AppConfig): Promise<MediaUrls> {
    const key = config.mediaSigningKey ?? (await keptKey(join(dirname(config.embeddedDbDir), KEPT_KEY_FILE)));
    return new MediaUrls(key, config.mediaSigningKeyPrevious, config.mediaUrlTtlMs, config.mediaPublicBaseUrl);
  }

  /** The unix second URLs signed at `now` stop working: MEDIA_URL_TTL from now. */
  expiresFrom(now: number): number {
    return Math.floor((now + this.ttlMs) / 1000);
  }

  /** `path?expires=...&signature=...` for a relative media path (`media/{id}/stock.jpg`). */
  sign(path: string, expires: number): string {
    return `${path}?expires=${expires}&signature=${signatureOf(this.keys[0], path, expires)}`;
  }

  /** An item's result URLs signed at `now`: of its first result, or of the one at `index`. */
  forItem(itemId: string, now: number, index = 0): SignedMediaUrls {
    const expires = this.expiresFrom(now);
    const url = (kind: OutputKind) => this.sign(mediaPath(itemId, kind, index), expires);
    const stock = url('stock');
    return {
      preview: url('preview'),
      stock,
      output: `${this.publicBaseUrl}/${stock}`,
      expiresAt: new Date(expires * 1000),
    };
  }

  /** Whether a request for `path` carries a signature of it by a current key, and whether it still holds at `now`. */
  check(path: string, expires: unknown, signature: unknown, now: number): MediaUrlCheck {
    if (typeof expires !== 'string' || typeof signature !== 'string' || !EXPIRES.test(expires)) return 'invalid';
    const given = Buffer.from(signature, 'base64url');
    // A signature with extra characters decodes to the same bytes: only the exact text the service wrote is taken.
    if (given.toString('base64url') !== signature) return 'invalid';
    const signed = this.keys.some((key) => {
      const expected = Buffer.from(signatureOf(key, path, Number(expires)), 'base64url');
      return expected.length === given.length && timingSafeEqual(expected, given);
    });
    if (!signed) return 'invalid';
    return Number(expires) * 1000 > now ? 'valid' : 'expired';
  }
}

function signatureOf(key: KeyObject, path: string, expires: number): string {
  return createHmac('sha256', key).update(`${path}\n${expires}`).digest('base64url');
}

/** The key made on the first start of the embedded default and kept for the next ones. */
async function keptKey(file: string): Promise<string> {
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  return keptSecret(file, KEPT_KEY, () => randomBytes(32).toString('base64url'));
}
