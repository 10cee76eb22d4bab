import { hash, randomBytes, timingSafeEqual } from 'node:crypto';

const KEY_PREFIX = 'igs_';
const SECRET_LENGTH = 40;
/** `igs_` and the first 8 secret characters: enough to find the row, too few to guess the rest. */
const LOOKUP_PREFIX_LENGTH = KEY_PREFIX.length + 8;
const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
const KEY_PATTERN = new RegExp(`^${KEY_PREFIX}[0-9A-Za-z]{${SECRET_LENGTH}}$`);
/** Generous on purpose: a key a client mangled (cut short, one character too many) is still a secret. */
const KEY_LIKE = `${KEY_PREFIX}[0-9A-Za-z]{8,}`;

/** A new random key: `igs_` and 40 base62 characters (about 238 bits). */
export function generateApiKey(): string {
  let secret = '';
  while (secret.length < SECRET_LENGTH) {
    for (const byte of randomBytes(SECRET_LENGTH)) {
      // 248 = 4 * 62: rejecting the rest keeps every character equally likely.
      if (byte < 248 && secret.length < SECRET_LENGTH) secret += BASE62[byte % 62];
    }
  }
  return KEY_PREFIX + secret;
}

export function isWellFormedApiKey(candidate: string): boolean {
  return KEY_PATTERN.test(candidate);
}

/** Whether text a client controls holds something shaped like a key, which must then not be logged. */
export function containsApiKey(text: string): boolean {
  return new RegExp(KEY_LIKE).test(text);
}

/** Text with everything shaped like a key masked, for text a client controls that is about to be logged. */
export function maskApiKeys(text: string): string {
  return text.replace(new RegExp(KEY_LIKE, 'g'), `${KEY_PREFIX}[masked]`);
}

export function lookupPrefix(key: string): string {
  return key.slice(0, LOOKUP_PREFIX_LENGTH);
}

export function hashApiKey(key: string): Buffer {
  // The one-shot form: every authenticated request hashes its key, and a Hash object per call costs more.
  return hash('sha256', key, 'buffer');
}

export function hashesEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}
