import pg from 'pg';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { freePort } from '../support/service.js';
import { imageCommand, runToExit } from '../support/deployment.js';

async function tablesOf(databaseUrl: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string }>(
      `SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1`,
    );
    return rows.map((row) => row.name);
  } finally {
    await client.end();
  }
}

describe('ROLE=migrate', () => {
  let env: TestEnvironment;

  beforeAll(async () => {
    env = await createTestEnvironment();
  }, 60_000);

  afterAll(async () => {
    await env?.dispose();
  }, 60_000);

  it('applies the migrations to an empty database and exits 0, without Redis and without listening', async () => {
    const port = await freePort();
    // Nothing answers on the Redis port given: the migrations must not need it.
    const redisUrl = `redis://127.0.0.1:${await freePort()}`;

    const sut = await runToExit(imageCommand(), {
      ...env.serviceEnv,
      ROLE: 'migrate',
      LOG_LEVEL: 'info',
      REDIS_URL: redisUrl,
      PORT: String(port),
      METRICS_PORT: String(await freePort()),
    });

    expect(sut).toMatchObject({ code: 0 });
    expect(sut.output).toContain('Applied migrations');
    expect(await tablesOf(env.databaseUrl)).toEqual(
      expect.arrayContaining(['api_keys', 'history_items', 'migrations', 'users']),
    );
    await expect(fetch(`http://127.0.0.1:${port}/health/live`)).rejects.toThrow();
  }, 30_000);

  it('is a no-op that still exits 0 when the schema is up to date', async () => {
    const sut = await runToExit(imageCommand(), { ...env.serviceEnv, ROLE: 'migrate', LOG_LEVEL: 'info' });

    expect(sut).toMatchObject({ code: 0 });
    expect(sut.output).not.toContain('Applied migrations');
    expect(sut.output).toContain('The database schema is up to date');
  }, 30_000);
});
