import { readFile, stat, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import pg from 'pg';
import { expectMatchesContract } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { final, getItem, submit, uniqueImage } from '../../support/harness.js';
import { freePort, type RunningService, startService } from '../../support/service.js';

const DEMO_KEY_LINE = /export IGS_API_KEY=(igs_[0-9A-Za-z]{40})\b/g;
const STARTUP_TIMEOUT_MS = 60_000;

/** Waits for the line the service logs once it listens, so everything printed during startup is in. */
async function startupOutput(service: RunningService): Promise<string> {
  while (!service.output().includes('Serving role')) await new Promise((resolve) => setTimeout(resolve, 50));
  return service.output();
}

/** A protocol 3.0 startup message for user postgres, as a client sends it first. */
function startupMessage(): Buffer {
  const body = Buffer.from('user\0postgres\0database\0postgres\0\0', 'latin1');
  const head = Buffer.alloc(8);
  head.writeInt32BE(8 + body.length, 0);
  head.writeInt32BE(196608, 4);
  return Buffer.concat([head, body]);
}

describe('the service on its embedded database (no DATABASE_URL)', () => {
  let env: TestEnvironment;
  let serviceEnv: Record<string, string>;
  let sut: RunningService | undefined;
  let firstBootOutput: string;
  let demoKey: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    serviceEnv = {
      // No DATABASE_URL: the service starts its embedded database.
      ...Object.fromEntries(Object.entries(env.serviceEnv).filter(([name]) => name !== 'DATABASE_URL')),
      // `info`, so the "Serving role" line marks the end of startup.
      LOG_LEVEL: 'info',
      EMBEDDED_DB_DIR: join(env.dataDir, 'pglite'),
      EMBEDDED_DB_PORT: String(await freePort()),
    };
    sut = await startService(serviceEnv, STARTUP_TIMEOUT_MS);
    firstBootOutput = await startupOutput(sut);
    demoKey = [...firstBootOutput.matchAll(DEMO_KEY_LINE)].map((match) => match[1])[0];
  }, 2 * STARTUP_TIMEOUT_MS);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, STARTUP_TIMEOUT_MS);

  function getTools(key: string): Promise<Response> {
    return fetch(`${sut!.baseUrl}/generation/tools`, { headers: { authorization: `Bearer ${key}` } });
  }

  /** Connects to the embedded database with this password: 1 from `SELECT 1`, or the refusal's SQLSTATE. */
  const connectAs = async (password: string | undefined) => {
    const client = new pg.Client({
      host: '127.0.0.1',
      port: Number(serviceEnv.EMBEDDED_DB_PORT),
      user: 'postgres',
      database: 'postgres',
      password,
    });
    try {
      await client.connect();
      return (await client.query<{ one: number }>('SELECT 1 AS one')).rows[0].one;
    } catch (error) {
      return (error as { code?: string; message: string }).code ?? (error as Error).message;
    } finally {
      await client.end().catch(() => undefined);
    }
  };

  it('prints a demo API key once on its first boot, and nowhere else in its output', () => {
    const keys = [...firstBootOutput.matchAll(DEMO_KEY_LINE)].map((match) => match[1]);

    expect(keys).toHaveLength(1);
    expect(firstBootOutput.split(keys[0])).toHaveLength(2);
  });

  it('says it runs on the embedded database', () => {
    expect(firstBootOutput).toMatch(/embedded PostgreSQL \(PGlite\)/);
  });

  it('accepts the demo key on /generation/tools', async () => {
    const response = await getTools(demoKey);

    expect(response.status).toBe(200);
    const body = (await expectMatchesContract(response, 'GET', '/generation/tools')) as unknown[];
    expect(body).toHaveLength(7);
  }, 30_000);

  it('still refuses a request without a key', async () => {
    const response = await fetch(`${sut!.baseUrl}/generation/tools`);

    expect(response.status).toBe(401);
  });

  it('is ready', async () => {
    const response = await fetch(`${sut!.baseUrl}/health/ready`);

    expect(response.status).toBe(200);
    expect(await expectMatchesContract(response, 'GET', '/health/ready')).toMatchObject({
      status: 'ok',
      details: { database: { status: 'up' }, queue: { status: 'up' } },
    });
  });

  it('runs a job to complete and answers many reads of its item at once', async () => {
    const id = await submit(sut!.baseUrl, demoKey, await uniqueImage());
    const item = await final(sut!.baseUrl, demoKey, id);

    expect(item.status).toBe('complete');
    const reads = await Promise.all(Array.from({ length: 40 }, () => getItem(sut!.baseUrl, demoKey, id)));
    expect(reads.map((answer) => answer.status)).toEqual(reads.map(() => 200));
    expect(reads.map((answer) => answer.body.history_item_id)).toEqual(reads.map(() => id));
  }, 60_000);

  it("keeps other users of the machine out: its directory is the owner's, and a connection needs its password", async () => {
    const dataDir = serviceEnv.EMBEDDED_DB_DIR;

    expect((await stat(dataDir)).mode & 0o777).toBe(0o700);
    expect((await stat(join(dataDir, 'igs-wire-password'))).mode & 0o777).toBe(0o600);
    expect(await connectAs('not-the-password')).toBe('28P01');
    expect(await connectAs('')).not.toBe(1);
    const password = (await readFile(join(dataDir, 'igs-wire-password'), 'utf8')).trim();
    expect(await connectAs(password)).toBe(1);
    // The service goes on serving after the refusals.
    expect((await getTools(demoKey)).status).toBe(200);
  });

  it.each([
    ['a startup message too short to say what it is', Buffer.from([0, 0, 0, 4, 0, 0, 0, 0])],
    [
      'a password message of a negative length',
      Buffer.concat([startupMessage(), Buffer.from([0x70, 0xff, 0xff, 0xff, 0xff])]),
    ],
    ['a startup message of 2 GB', Buffer.from([0x7f, 0xff, 0xff, 0xff, 0, 3, 0, 0])],
  ])('drops a connection that sends %s, and goes on serving', async (_case, bytes) => {
    const socket = connect({ host: '127.0.0.1', port: Number(serviceEnv.EMBEDDED_DB_PORT) });
    socket.on('error', () => undefined);
    socket.on('data', () => undefined);
    socket.write(bytes);
    await new Promise((resolve) => socket.once('close', resolve));

    expect((await getTools(demoKey)).status).toBe(200);
  });

  it(
    'after a restart on the same directory, prints no new key and keeps the old one working',
    async () => {
      expect(await sut!.stop()).toBe(0);
      // As a crash between creating the password file and writing it would leave it.
      const passwordFile = join(serviceEnv.EMBEDDED_DB_DIR, 'igs-wire-password');
      await writeFile(passwordFile, '');

      sut = await startService(serviceEnv, STARTUP_TIMEOUT_MS);
      const output = await startupOutput(sut);

      expect(output).not.toContain('IGS_API_KEY');
      expect(output).not.toMatch(/igs_[0-9A-Za-z]{40}/);
      expect((await getTools(demoKey)).status).toBe(200);
      expect((await fetch(`${sut.baseUrl}/health/ready`)).status).toBe(200);
      expect(await readFile(passwordFile, 'utf8')).toMatch(/^[0-9a-f]{48}$/);
      expect(await connectAs('')).not.toBe(1);
    },
    2 * STARTUP_TIMEOUT_MS,
  );
});
