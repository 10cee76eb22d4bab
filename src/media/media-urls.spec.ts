import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppConfig } from '../config/config.js';
import { MediaUrls } from './media-urls.js';

const OLD_KEY = 'the-key-before-the-rotation-0123456789';
const KEY = 'the-current-media-signing-key-0123456789';
const PATH = 'media/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44/stock.jpg';
const NOW = Date.parse('2025-06-01T12:00:00.000Z');
const HOUR = 3_600_000;

/** The `expires` and `signature` of a signed path, as the route's query gets them. */
function queryOf(signed: string): { expires: string; signature: string } {
  const query = new URLSearchParams(signed.split('?')[1]);
  return { expires: query.get('expires')!, signature: query.get('signature')! };
}

describe('MediaUrls', () => {
  const sut = new MediaUrls(KEY, undefined, HOUR, 'http://localhost:3000');

  it('takes what it signed until it expires, then calls it expired', () => {
    const { expires, signature } = queryOf(sut.sign(PATH, sut.expiresFrom(NOW)));

    expect(Number(expires)).toBe((NOW + HOUR) / 1000);
    expect(signature).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(sut.check(PATH, expires, signature, NOW + HOUR - 1000)).toBe('valid');
    expect(sut.check(PATH, expires, signature, NOW + HOUR)).toBe('expired');
  });

  it('refuses a signature moved to another path, a later expiry, an altered or a missing one', () => {
    const { expires, signature } = queryOf(sut.sign(PATH, sut.expiresFrom(NOW)));
    const flipped = (signature[0] === 'A' ? 'B' : 'A') + signature.slice(1);

    expect(sut.check(PATH.replace('stock.jpg', 'preview.webp'), expires, signature, NOW)).toBe('invalid');
    expect(sut.check(PATH, String(Number(expires) + 3600), signature, NOW)).toBe('invalid');
    expect(sut.check(PATH, expires, flipped, NOW)).toBe('invalid');
    expect(sut.check(PATH, expires, `${signature}=`, NOW)).toBe('invalid');
    expect(sut.check(PATH, expires, undefined, NOW)).toBe('invalid');
    expect(sut.check(PATH, undefined, signature, NOW)).toBe('invalid');
    expect(sut.check(PATH, [expires, expires], signature, NOW)).toBe('invalid');
    expect(sut.check(PATH, `${expires}.0`, signature, NOW)).toBe('invalid');
  });

  it('refuses a URL signed with another key, expired or not', () => {
    const other = new MediaUrls('another-deployments-key-0123456789abc', undefined, HOUR, 'http://localhost:3000');
    const { expires, signature } = queryOf(other.sign(PATH, 1));

    expect(sut.check(PATH, expires, signature, NOW)).toBe('invalid');
  });

  it('still takes what the previous key signed during a rotation, and signs with the new key only', () => {
    const before = new MediaUrls(OLD_KEY, undefined, HOUR, 'http://localhost:3000');
    const rotated = new MediaUrls(KEY, OLD_KEY, HOUR, 'http://localhost:3000');
    const signedBefore = queryOf(before.sign(PATH, before.expiresFrom(NOW)));
    const signedAfter = queryOf(rotated.sign(PATH, rotated.expiresFrom(NOW)));

    expect(rotated.check(PATH, signedBefore.expires, signedBefore.signature, NOW)).toBe('valid');
    expect(sut.check(PATH, signedAfter.expires, signedAfter.signature, NOW)).toBe('valid');
    expect(sut.check(PATH, signedBefore.expires, signedBefore.signature, NOW)).toBe('invalid');
  });

  describe('on the embedded default (no DATABASE_URL, no MEDIA_SIGNING_KEY)', () => {
    let dir: string;

    beforeEach(async () => {
      dir = await mkdtemp(join(tmpdir(), 'media-urls-'));
    });

    afterEach(async () => {
      await rm(dir, { recursive: true, force: true });
    });

    it('makes a key under the data folder on the first start and keeps it for the next', async () => {
      const config = new AppConfig({ EMBEDDED_DB_DIR: join(dir, 'data', 'pglite') });
      const first = await MediaUrls.from(config);
      const signed = queryOf(first.sign(PATH, first.expiresFrom(NOW)));

      const restarted = await MediaUrls.from(config);

      expect(restarted.check(PATH, signed.expires, signed.signature, NOW)).toBe('valid');
      const keyFile = join(dir, 'data', 'media-signing-key');
      expect((await readFile(keyFile, 'utf8')).length).toBeGreaterThanOrEqual(32);
      expect((await stat(keyFile)).mode & 0o777).toBe(0o600);
    });
  });
});
