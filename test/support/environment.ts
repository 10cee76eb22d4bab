import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';

/** The PostgreSQL server tests run against; each run gets a database of its own on it. */
const ADMIN_URL = process.env.TEST_ADMIN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A database, a Redis namespace and data directories that belong to one test file and vanish after it. */
export interface TestEnvironment {
  databaseUrl: string;
  redisUrl: string;
  redisPrefix: string;
  dataDir: string;
  /** Environment variables that point a service process at this environment. */
  serviceEnv: Record<string, string>;
  dispose(): Promise<void>;
}

/** Servers to use instead of the shared ones, e.g. private instances a fault test takes down. */
export interface EnvironmentServers {
  adminDatabaseUrl?: string;
  redisUrl?: string;
}

export async function createTestEnvironment(servers: EnvironmentServers = {}): Promise<TestEnvironment> {
  const adminUrl = servers.adminDatabaseUrl ?? ADMIN_URL;
  const redisUrl = servers.redisUrl ?? REDIS_URL;
  const name = `igs_test_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const databaseUrl = new URL(adminUrl);
  databaseUrl.pathname = `/${name}`;
  const dataDir = await mkdtemp(join(tmpdir(), `${name}-`));
  const env: TestEnvironment = {
    databaseUrl: databaseUrl.toString(),
    redisUrl,
    redisPrefix: name,
    dataDir,
    serviceEnv: {
      DATABASE_URL: databaseUrl.toString(),
      REDIS_URL: redisUrl,
      REDIS_PREFIX: name,
      MEDIA_ROOT: join(dataDir, 'media'),
      INPUT_ROOT: join(dataDir, 'inputs'),
      UPLOAD_TMP_DIR: join(dataDir, 'tmp'),
      LOG_LEVEL: 'warn',
      // On PostgreSQL every process must be given one; the processes of a test share it, as replicas do.
      MEDIA_SIGNING_KEY: randomBytes(32).toString('base64url'),
    },
    async dispose() {
      await deleteRedisNamespace(redisUrl, name);
      const cleanup = new pg.Client({ connectionString: adminUrl });
      await cleanup.connect();
      try {
        await cleanup.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await cleanup.end();
      }
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  return env;
}

async function deleteRedisNamespace(redisUrl: string, prefix: string): Promise<void> {
  const redis = new Redis(redisUrl);
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      if (keys.length > 0) await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}
