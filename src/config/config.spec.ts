import { resolve } from 'node:path';
import { AppConfig, assertServingSettings, ConfigError } from './config.js';

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
      expect(sut.dbPipelineConnections).toBe(2);
      expect(sut.mediaRoot).toBe(resolve('./data/media'));
      expect(sut.inputRoot).toBe(resolve('./data/inputs'));
      expect(sut.uploadTmpDir).toBe(resolve('./data/tmp'));
      expect(sut.uploadMaxFileBytes).toBe(10 * 1024 * 1024);
      expect(sut.uploadMaxParts).toBe(10);
      expect(sut.imageMinSide).toBe(64);
      expect(sut.imageMaxSide).toBe(8192);
      expect(sut.imageMaxPixels).toBe(40_000_000);
      expect(sut.outputMaxPixels).toBe(100_000_000);
      expect(sut.limitMaxPending).toBe(10);
      expect(sut.limitCreationsPerMinute).toBe(60);
      expect(sut.authCacheTtlMs).toBe(10_000);
    });

    it('runs both the API and the worker', () => {
      expect(sut.runsApi).toBe(true);
      expect(sut.runsWorker).toBe(true);
    });

    it('runs every tool on the local engine: no model server, no route', () => {
      expect(sut.engineRouting).toEqual({ servers: [], routes: [] });
    });

    it('uses the embedded database when DATABASE_URL is unset', () => {
      expect(sut.databaseUrl).toBeUndefined();
    });
  });

  it('treats an empty DATABASE_URL as unset', () => {
    const sut = configFrom({ DATABASE_URL: '  ' });

    expect(sut.databaseUrl).toBeUndefined();
  });

  it('uses an external database when DATABASE_URL is set', () => {
    const sut = configFrom({ DATABASE_URL: 'postgres://app@db.example:5432/igs' });

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

    const routed = Object.fromEntries(sut.engineRouting.routes.map((route) => [route.tool, route]));
    expect(Object.keys(routed).sort()).toEqual(['fabric', 'fashion_swap']);
    expect(routed.fashion_swap).toMatchObject({
      kind: 'cog',
      engine: 'cog:http://h:5000',
      inputs: { clothes: 'clothes', person: 'person' },
      params: {},
      passGenerationType: true,
    });
    expect(sut.engineRouting.servers).toEqual([
      expect.objectContaining({ name: 'cog:http://h:5000', kind: 'cog', url: 'http://h:5000', concurrency: 1 }),
      expect.objectContaining({ name: 'cog:https://cog.example', kind: 'cog', url: 'https://cog.example' }),
    ]);
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

  it.each(['cog:https://user:s3cr3t-pa55@cog.example', 'cog:http://:s3cr3t-pa55@h:5000', 'cog:http://user@h:5000'])(
    'refuses credentials in a shortcut URL, which would name its server in logs, traces and Redis keys: %s',
    (value) => {
      const error = configErrorFrom({ ENGINE_FASHION_SWAP: value });

      expect(error.problems).toEqual([
        expect.stringMatching(/^ENGINE_FASHION_SWAP must not hold credentials in its URL .*ENGINES_FILE .*headers$/),
      ]);
      expect(error.message).not.toMatch(/s3cr3t-pa55|user@/);
    },
  );

  it('never echoes a password from a shortcut it cannot read', () => {
    const error = configErrorFrom({ ENGINE_FASHION_SWAP: 'cog:ftp://user:s3cr3t-pa55@h:5000' });

    expect(error.problems).toEqual([expect.stringContaining('ENGINE_FASHION_SWAP must be "local" or "cog:')]);
    expect(error.message).not.toContain('s3cr3t-pa55');
  });

  it('rejects a shortcut for a tool that does not exist, naming the shortcuts there are', () => {
    const error = configErrorFrom({ ENGINE_FABRC: 'cog:http://h:5000' });

    expect(error.problems).toEqual([expect.stringMatching(/^ENGINE_FABRC names no tool: the shortcuts are ENGINE_/)]);
    expect(error.message).toContain('ENGINE_FABRIC');
  });

  it('leaves other ENGINE_ variables alone, such as one a routing file reads', () => {
    expect(() => configFrom({ ENGINE_TIMEOUT_MS: '1000', ENGINE_GPU_TOKEN: 'secret' })).not.toThrow();
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

  it('refuses a REDIS_PREFIX ending in ":", which the service adds itself', () => {
    const error = configErrorFrom({ REDIS_PREFIX: 'igs:' });

    expect(error.problems).toEqual([expect.stringContaining('REDIS_PREFIX')]);
    expect(error.message).toContain('"igs:"');
  });

  it.each(['igs*', 'ig?', 'igs[1]', 'igs\\x'])('refuses a REDIS_PREFIX with a glob character: %s', (prefix) => {
    const error = configErrorFrom({ REDIS_PREFIX: prefix });

    expect(error.problems).toEqual([expect.stringContaining('REDIS_PREFIX must not hold')]);
  });

  it('takes a REDIS_PREFIX with a colon inside, such as staging:igs', () => {
    expect(configFrom({ REDIS_PREFIX: 'staging:igs' }).redisPrefix).toBe('staging:igs');
  });

  it('accepts a DATABASE_URL with a password without failing', () => {
    const sut = configFrom({ DATABASE_URL: 'postgresql://app:s3cr3t@db.example/igs' });

    expect(sut.databaseUrl).toBe('postgresql://app:s3cr3t@db.example/igs');
  });
});

describe('AppConfig: roles, storage and metrics', () => {
  it('runs neither the API nor the worker with ROLE=migrate', () => {
    const sut = configFrom({ ROLE: 'migrate' });

    expect(sut.role).toBe('migrate');
    expect(sut.runsApi).toBe(false);
    expect(sut.runsWorker).toBe(false);
  });

  it('keeps media on the local disk, served by the service itself, and no metrics listener by default', () => {
    const sut = configFrom({ PUBLIC_BASE_URL: 'https://api.example.com/' });

    expect(sut.storage).toEqual({ kind: 'local' });
    expect(sut.mediaPublicBaseUrl).toBe('https://api.example.com');
    expect(sut.metricsPort).toBe(0);
  });

  it('reads the S3 settings with STORAGE=s3', () => {
    const sut = configFrom({
      STORAGE: 's3',
      S3_ENDPOINT: 'http://minio:9000',
      S3_REGION: 'eu-west-1',
      S3_BUCKET: 'igs',
      S3_ACCESS_KEY_ID: 'id',
      S3_SECRET_ACCESS_KEY: 'secret',
      S3_FORCE_PATH_STYLE: 'true',
      MEDIA_PUBLIC_BASE_URL: 'https://cdn.example.com/',
      METRICS_PORT: '9464',
    });

    expect(sut.storage).toEqual({
      kind: 's3',
      endpoint: 'http://minio:9000',
      region: 'eu-west-1',
      bucket: 'igs',
      credentials: { accessKeyId: 'id', secretAccessKey: 'secret' },
      forcePathStyle: true,
    });
    expect(sut.mediaPublicBaseUrl).toBe('https://cdn.example.com');
    expect(sut.metricsPort).toBe(9464);
  });

  it('leaves AWS S3 credentials and endpoint to the SDK when none are given', () => {
    const sut = configFrom({ STORAGE: 's3', S3_BUCKET: 'igs' });

    expect(sut.storage).toEqual({
      kind: 's3',
      endpoint: undefined,
      region: 'us-east-1',
      bucket: 'igs',
      credentials: undefined,
      forcePathStyle: false,
    });
  });

  it.each([
    [{ STORAGE: 'gcs' }, 'STORAGE'],
    [{ STORAGE: 's3' }, 'S3_BUCKET'],
    [{ STORAGE: 's3', S3_BUCKET: 'igs', S3_ACCESS_KEY_ID: 'id' }, 'S3_SECRET_ACCESS_KEY'],
    [{ STORAGE: 's3', S3_BUCKET: 'igs', S3_ENDPOINT: 'minio:9000' }, 'S3_ENDPOINT'],
    [{ STORAGE: 's3', S3_BUCKET: 'igs', S3_FORCE_PATH_STYLE: 'yes' }, 'S3_FORCE_PATH_STYLE'],
    [{ MEDIA_PUBLIC_BASE_URL: 'cdn.example.com' }, 'MEDIA_PUBLIC_BASE_URL'],
    [{ METRICS_PORT: '65536' }, 'METRICS_PORT'],
  ])('rejects %j with a ConfigError naming %s', (env, name) => {
    const error = configErrorFrom(env);

    expect(error.message).toContain(name);
    expect(error.problems).toHaveLength(1);
  });

  it('reads no S3 setting unless STORAGE=s3', () => {
    const sut = configFrom({ S3_ENDPOINT: 'not a url', S3_ACCESS_KEY_ID: 'id' });

    expect(sut.storage).toEqual({ kind: 'local' });
  });
});

describe('AppConfig: HTTP hardening', () => {
  it('allows no CORS origin, trusts no proxy and limits failed authentications by default', () => {
    const sut = configFrom({});

    expect(sut.corsOrigins).toEqual([]);
    expect(sut.trustProxyHops).toBe(0);
    expect(sut.authFailuresPerMinute).toBe(30);
    expect(sut.httpIdleTimeoutMs).toBe(60_000);
  });

  it('reads CORS_ORIGINS as a comma-separated list of exact origins', () => {
    const sut = configFrom({ CORS_ORIGINS: ' https://app.example.com, http://localhost:5173 ,' });

    expect(sut.corsOrigins).toEqual(['https://app.example.com', 'http://localhost:5173']);
  });

  it.each([
    ['a trailing slash', 'https://app.example.com/'],
    ['a path', 'https://app.example.com/app'],
    ['a wildcard', '*'],
    ['no scheme', 'app.example.com'],
    ['another scheme', 'ftp://app.example.com'],
    ['upper case', 'https://App.example.com'],
    ['a default port, which browsers never send', 'https://app.example.com:443'],
  ])('rejects a CORS origin with %s, naming CORS_ORIGINS and the value', (_case, origin) => {
    const error = configErrorFrom({ CORS_ORIGINS: `https://ok.example.com,${origin}` });

    expect(error.problems).toHaveLength(1);
    expect(error.message).toContain('CORS_ORIGINS');
    expect(error.message).toContain(`"${origin}"`);
  });

  it.each([
    ['AUTH_FAILURES_PER_MINUTE', '0'],
    ['TRUST_PROXY', 'true'],
    ['TRUST_PROXY', '11'],
    ['HTTP_IDLE_TIMEOUT_MS', '10'],
    ['DB_PIPELINE_CONNECTIONS', '0'],
    ['DB_PIPELINE_CONNECTIONS', '65'],
  ])('rejects %s=%s with a ConfigError naming it', (name, value) => {
    const error = configErrorFrom({ [name]: value });

    expect(error.message).toContain(name);
    expect(error.problems).toHaveLength(1);
  });
});

describe('AppConfig retention', () => {
  it('keeps items until deleted when HISTORY_RETENTION is unset, and sweeps once a minute', () => {
    const sut = configFrom({});

    expect(sut.historyRetentionMs).toBeUndefined();
    expect(sut.retentionSweepIntervalMs).toBe(60_000);
  });

  it.each([
    ['30d', 30 * 86_400_000],
    ['12h', 12 * 3_600_000],
    ['90s', 90_000],
  ])('reads HISTORY_RETENTION=%s as a duration', (text, ms) => {
    expect(configFrom({ HISTORY_RETENTION: text }).historyRetentionMs).toBe(ms);
  });

  it('takes a retention of a century', () => {
    expect(configFrom({ HISTORY_RETENTION: '36500d' }).historyRetentionMs).toBe(36_500 * 86_400_000);
  });

  // Longer, an item's expires_at is no date JavaScript can write (a 500 on every read of a final item), or the sweep's
  // cut-off no timestamp PostgreSQL has (every round fails).
  it.each(['30', 'a month', '500ms', '-1d', '36501d', '100000000d'])(
    'refuses HISTORY_RETENTION=%s, naming it',
    (text) => {
      expect(configErrorFrom({ HISTORY_RETENTION: text }).problems).toEqual([
        `HISTORY_RETENTION must be a duration from a second to 36500d such as 30d, 12h or 90s, got "${text}"`,
      ]);
    },
  );

  it('refuses a sweep interval over a minute', () => {
    expect(configErrorFrom({ RETENTION_SWEEP_INTERVAL_MS: '120000' }).problems).toEqual([
      'RETENTION_SWEEP_INTERVAL_MS must be a whole number from 100 to 60000, got "120000"',
    ]);
  });
});

describe('AppConfig stored files and URL inputs', () => {
  it('keeps stored files a day and gives an image URL ten seconds when unset', () => {
    const sut = configFrom({});

    expect([sut.fileTtlMs, sut.urlFetchTimeoutMs]).toEqual([86_400_000, 10_000]);
  });

  it('reads FILE_TTL and URL_FETCH_TIMEOUT as durations of a second or more', () => {
    const sut = configFrom({ FILE_TTL: '1s', URL_FETCH_TIMEOUT: '2m' });

    expect([sut.fileTtlMs, sut.urlFetchTimeoutMs]).toEqual([1000, 120_000]);
  });

  it.each(['FILE_TTL', 'URL_FETCH_TIMEOUT'])('refuses %s under a second, naming it', (name) => {
    expect(configErrorFrom({ [name]: '500ms' }).problems).toEqual([
      `${name} must be a duration from a second to 36500d such as 30d, 12h or 90s, got "500ms"`,
    ]);
  });
});

describe('AppConfig media URLs', () => {
  const KEY = 'a-media-signing-key-of-at-least-32-chars';

  it('signs for an hour and sends results itself by default, with no key given', () => {
    const sut = configFrom({});

    expect([sut.mediaSigningKey, sut.mediaSigningKeyPrevious, sut.mediaUrlTtlMs, sut.mediaDelivery]).toEqual([
      undefined,
      undefined,
      3_600_000,
      'proxy',
    ]);
  });

  it('reads the keys, the lifetime and presigned delivery on S3', () => {
    const sut = configFrom({
      MEDIA_SIGNING_KEY: KEY,
      MEDIA_SIGNING_KEY_PREVIOUS: `old-${KEY}`,
      MEDIA_URL_TTL: '15m',
      STORAGE: 's3',
      S3_BUCKET: 'igs',
      MEDIA_DELIVERY: 'presigned',
    });

    expect([sut.mediaSigningKey, sut.mediaSigningKeyPrevious, sut.mediaUrlTtlMs, sut.mediaDelivery]).toEqual([
      KEY,
      `old-${KEY}`,
      900_000,
      'presigned',
    ]);
  });

  it('refuses a key under 32 characters without echoing it', () => {
    const { problems } = configErrorFrom({ MEDIA_SIGNING_KEY: 'short-secret', MEDIA_SIGNING_KEY_PREVIOUS: 'older' });

    expect(problems).toEqual([
      'MEDIA_SIGNING_KEY must be at least 32 characters (e.g. the output of openssl rand -base64 48)',
      'MEDIA_SIGNING_KEY_PREVIOUS must be at least 32 characters (e.g. the output of openssl rand -base64 48)',
    ]);
    expect(problems.join()).not.toMatch(/short-secret|older/);
  });

  it('refuses a lifetime past what a presigned URL may have, and presigned delivery off S3', () => {
    expect(configErrorFrom({ MEDIA_URL_TTL: '8d', MEDIA_DELIVERY: 'presigned' }).problems).toEqual([
      'MEDIA_URL_TTL must be a duration from a second to 7d such as 30d, 12h or 90s, got "8d"',
      'MEDIA_DELIVERY=presigned needs STORAGE=s3: only a bucket can answer a presigned URL',
    ]);
  });

  it('stops a serving process on PostgreSQL without MEDIA_SIGNING_KEY, naming it; not migrate, nor the embedded default', () => {
    const database = { DATABASE_URL: 'postgres://igs@db:5432/igs' };

    expect(() => assertServingSettings(configFrom(database))).toThrow(
      /MEDIA_SIGNING_KEY must be set when DATABASE_URL is/,
    );
    expect(() => assertServingSettings(configFrom({ ...database, ROLE: 'migrate' }))).not.toThrow();
    expect(() => assertServingSettings(configFrom({ ...database, MEDIA_SIGNING_KEY: KEY }))).not.toThrow();
    expect(() => assertServingSettings(configFrom({}))).not.toThrow();
  });
});
