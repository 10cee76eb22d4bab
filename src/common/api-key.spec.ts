import { createHash } from 'node:crypto';
import {
  containsApiKey,
  generateApiKey,
  hashApiKey,
  hashesEqual,
  isWellFormedApiKey,
  lookupPrefix,
  maskApiKeys,
} from './api-key.js';

const KEY_FORMAT = /^igs_[0-9A-Za-z]{40}$/;

describe('generateApiKey', () => {
  it('makes keys of the form igs_ and 40 base62 characters', () => {
    for (let i = 0; i < 200; i++) {
      const sut = generateApiKey();

      expect(sut).toMatch(KEY_FORMAT);
    }
  });

  it('makes a different key every time', () => {
    const keys = new Set(Array.from({ length: 1000 }, () => generateApiKey()));

    expect(keys.size).toBe(1000);
  });

  it('uses the whole base62 alphabet', () => {
    const seen = new Set(
      Array.from({ length: 200 }, () => generateApiKey().slice(4))
        .join('')
        .split(''),
    );

    expect(seen.size).toBe(62);
  });

  it('makes keys it recognises as well formed', () => {
    const sut = generateApiKey();

    expect(isWellFormedApiKey(sut)).toBe(true);
  });
});

describe('isWellFormedApiKey', () => {
  const valid = `igs_${'aZ09'.repeat(10)}`;

  it('accepts igs_ and 40 base62 characters', () => {
    expect(isWellFormedApiKey(valid)).toBe(true);
  });

  it.each([
    ['empty', ''],
    ['only the prefix', 'igs_'],
    ['one character short', valid.slice(0, -1)],
    ['one character long', `${valid}a`],
    ['another prefix', `sk_${valid.slice(4)}`],
    ['an upper-case prefix', `IGS_${valid.slice(4)}`],
    ['a non-base62 character', `${valid.slice(0, -1)}-`],
    ['an underscore in the secret', `${valid.slice(0, -1)}_`],
    ['a trailing newline', `${valid}\n`],
    ['a leading space', ` ${valid}`],
    ['a non-ASCII letter', `${valid.slice(0, -1)}é`],
    ['a made-up word', 'not-a-key'],
  ])('rejects %s', (_case, candidate) => {
    expect(isWellFormedApiKey(candidate)).toBe(false);
  });
});

describe('hashApiKey', () => {
  it('is the SHA-256 digest of the key', () => {
    const key = generateApiKey();

    const sut = hashApiKey(key);

    expect(sut).toBeInstanceOf(Buffer);
    expect(sut).toHaveLength(32);
    expect(sut.equals(createHash('sha256').update(key).digest())).toBe(true);
  });

  it('matches a known SHA-256 vector', () => {
    expect(hashApiKey('abc').toString('hex')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });

  it('differs for different keys', () => {
    expect(hashApiKey(generateApiKey()).equals(hashApiKey(generateApiKey()))).toBe(false);
  });
});

describe('hashesEqual', () => {
  it('compares hashes by content', () => {
    const key = generateApiKey();

    expect(hashesEqual(hashApiKey(key), hashApiKey(key))).toBe(true);
    expect(hashesEqual(hashApiKey(key), hashApiKey(generateApiKey()))).toBe(false);
  });

  it('answers false for buffers of different lengths instead of throwing', () => {
    expect(hashesEqual(Buffer.alloc(32), Buffer.alloc(16))).toBe(false);
  });
});

describe('lookupPrefix', () => {
  it('is igs_ and the first 8 characters of the secret', () => {
    const key = generateApiKey();

    const sut = lookupPrefix(key);

    expect(sut).toBe(key.slice(0, 12));
    expect(sut).toMatch(/^igs_[0-9A-Za-z]{8}$/);
  });

  it('is the same for a key and for its prefix, so either one names the key', () => {
    const key = generateApiKey();

    expect(lookupPrefix(lookupPrefix(key))).toBe(lookupPrefix(key));
  });

  it('never reveals the rest of the key', () => {
    const key = generateApiKey();

    expect(key.startsWith(lookupPrefix(key))).toBe(true);
    expect(lookupPrefix(key)).not.toContain(key.slice(12));
  });
});

describe('maskApiKeys', () => {
  it('masks every key in a text and keeps the rest', () => {
    const [first, second] = [generateApiKey(), generateApiKey()];

    const sut = maskApiKeys(`/user/generation-history/${first}/x/${second}`);

    expect(sut).toBe('/user/generation-history/igs_[masked]/x/igs_[masked]');
  });

  it('masks a key cut short or made longer, which is still a secret', () => {
    const key = generateApiKey();

    expect(maskApiKeys(key.slice(0, 20))).toBe('igs_[masked]');
    expect(maskApiKeys(`${key}abc`)).toBe('igs_[masked]');
  });

  it('leaves text without a key alone', () => {
    expect(maskApiKeys('/generation/tools')).toBe('/generation/tools');
  });
});

describe('containsApiKey', () => {
  it('finds a key anywhere in a text', () => {
    expect(containsApiKey(`req-${generateApiKey()}-1`)).toBe(true);
  });

  it('does not take the bare prefix or a request id for a key', () => {
    expect(containsApiKey('igs_')).toBe(false);
    expect(containsApiKey('3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44')).toBe(false);
  });
});
