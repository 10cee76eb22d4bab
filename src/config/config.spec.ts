import { resolve } from 'node:path';
import { AppConfig, ConfigError } from './config.js';

function configFrom(env: Record<string, string>): AppConfig {
  return new AppConfig(env);
}

function configErrorFrom(env: Record<string, string>): ConfigError {
  try {
    configFrom(env);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('expected a ConfigError, but the configuration was accepted');
}

describe('AppConfig', () => {
  describe('with an empty environment', () => {
    const sut = configFrom({});

    it('uses the documented defaults', () => {
      expect(sut.role).toBe('all');
      expect(sut.host).toBe('0.0.0.0');
      expect(sut.port).toBe(3000);
      expect(sut.logLevel).toBe('info');
      expect(sut.publicBaseUrl).toBe('http://localhost:3000');
      expect(sut.redisUrl).toBe('redis://127.0.0.1:6379');
      expect(sut.redisPrefix).toBe('igs');
      expect(sut.embeddedDbDir).toBe(resolve('./data/pglite'));
      expect(sut.embeddedDbPort).toBe(54329);
      expect(sut.dbPoolSize).toBe(10);
      expect(sut.mediaRoot).toBe(resolve('./data/media'));
      expect(sut.inputRoot).toBe(resolve('./data/inputs'));
      expect(sut.uploadTmpDir).toBe(resolve('./data/tmp'));
      expect(sut.uploadMaxFileBytes).toBe(10 * 1024 * 1024);
      expect(sut.uploadMaxParts).toBe(10);
      expect(sut.imageMinSide).toBe(64);
      expect(sut.imageMaxSide).toBe(8192);
      expect(sut.imageMaxPixels).toBe(40_000_000);
      expect(sut.limitMaxPending).toBe(10);
      expect(sut.limitCreationsPerMinute).toBe(60);
      expect(sut.authCacheTtlMs).toBe(10_000);
    });

    it('runs both the API and the worker', () => {
      expect(sut.runsApi).toBe(true);
      expect(sut.runsWorker).toBe(true);
    });

    it('runs every tool on the local engine', () => {
      expect(Object.keys(sut.engines).sort()).toEqual(
        ['default', 'fabric', 'fashion_card', 'fashion_swap', 'fashion_swap_half', 'furniture', 'lengerie'].sort(),
      );
      for (const engine of Object.values(sut.engines)) expect(engine).toEqual({ kind: 'local' });
    });

    it('uses the embedded database when DATABASE_URL is unset', () => {
      expect(sut.databaseUrl).toBeUndefined();
      expect(sut.usesEmbeddedDatabase).toBe(true);
    });
  });

  it('treats an empty DATABASE_URL as unset', () => {
    const sut = configFrom({ DATABASE_URL: '  ' });

    expect(sut.usesEmbeddedDatabase).toBe(true);
  });

  it('uses an external database when DATABASE_URL is set', () => {
    const sut = configFrom({ DATABASE_URL: 'postgres://app@db.example:5432/igs' });

    expect(sut.usesEmbeddedDatabase).toBe(false);
    expect(sut.databaseUrl).toBe('postgres://app@db.example:5432/igs');
  });

  it('reads the values it is given', () => {
    const sut = configFrom({
      ROLE: 'worker',
      PORT: '8080',
      PUBLIC_BASE_URL: 'https://images.example.com/',
      REDIS_URL: 'rediss://cache.example:6380',
      AUTH_CACHE_TTL_MS: '0',
    });

    expect(sut.role).toBe('worker');
    expect(sut.runsApi).toBe(false);
    expect(sut.runsWorker).toBe(true);
    expect(sut.port).toBe(8080);
    expect(sut.publicBaseUrl).toBe('https://images.example.com');
    expect(sut.redisUrl).toBe('rediss://cache.example:6380');
    expect(sut.authCacheTtlMs).toBe(0);
  });

  it('defaults the public base URL to the configured port', () => {
    const sut = configFrom({ PORT: '4321' });

    expect(sut.publicBaseUrl).toBe('http://localhost:4321');
  });

  it('parses a Cog engine setting', () => {
    const sut = configFrom({ ENGINE_FASHION_SWAP: 'cog:http://h:5000', ENGINE_FABRIC: 'cog:https://cog.example/' });

    expect(sut.engines.fashion_swap).toEqual({ kind: 'cog', url: 'http://h:5000' });
    expect(sut.engines.fabric).toEqual({ kind: 'cog', url: 'https://cog.example' });
    expect(sut.engines.furniture).toEqual({ kind: 'local' });
  });

  it.each([
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['PORT', '3.5'],
    ['ROLE', 'x'],
    ['LOG_LEVEL', 'loud'],
    ['REDIS_URL', 'http://127.0.0.1:6379'],
    ['DATABASE_URL', 'mysql://db.example/igs'],
    ['PUBLIC_BASE_URL', 'not a url'],
    ['ENGINE_FASHION_SWAP', 'foo'],
    ['ENGINE_FASHION_SWAP', 'cog:ftp://h:5000'],
    ['AUTH_CACHE_TTL_MS', '-1'],
  ])('rejects %s=%s with a ConfigError naming it', (name, value) => {
    const error = configErrorFrom({ [name]: value });

    expect(error.message).toContain(name);
    expect(error.problems).toHaveLength(1);
  });

  it('names every bad variable in one message', () => {
    const error = configErrorFrom({
      PORT: 'abc',
      ROLE: 'x',
      REDIS_URL: 'http://127.0.0.1:6379',
      ENGINE_FASHION_SWAP: 'foo',
    });

    expect(error).toBeInstanceOf(ConfigError);
    expect(error.problems).toHaveLength(4);
    for (const name of ['PORT', 'ROLE', 'REDIS_URL', 'ENGINE_FASHION_SWAP']) expect(error.message).toContain(name);
    expect(error.message).toContain('"abc"');
    expect(error.message).toContain('"x"');
    expect(error.message).toContain('"foo"');
  });

  it('never echoes a password from a rejected DATABASE_URL or REDIS_URL', () => {
    const error = configErrorFrom({
      DATABASE_URL: 'mysql://admin:s3cr3t-pa55@db.example/igs',
      REDIS_URL: 'http://user:r3d1s-pa55@cache.example:6379',
    });

    expect(error.message).toContain('DATABASE_URL');
    expect(error.message).toContain('REDIS_URL');
    expect(error.message).not.toContain('s3cr3t-pa55');
    expect(error.message).not.toContain('r3d1s-pa55');
  });

  it('accepts a DATABASE_URL with a password without failing', () => {
    const sut = configFrom({ DATABASE_URL: 'postgresql://app:s3cr3t@db.example/igs' });

    expect(sut.usesEmbeddedDatabase).toBe(false);
  });
});
