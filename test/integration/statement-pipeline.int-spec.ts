import { Socket } from 'node:net';
import pg from 'pg';
import { ServiceUnavailableError } from '../../src/common/unavailable.js';
import type { SqlStatement } from '../../src/database/data-source.js';
import { translateDatabaseError } from '../../src/database/database.js';
import { PIPELINE_APPLICATION_NAME, StatementPipeline } from '../../src/database/statement-pipeline.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { waitUntil } from '../support/harness.js';
import { freePort } from '../support/service.js';

const echo = (value: unknown): SqlStatement => ({ name: 'echo', text: 'SELECT $1::int AS n', values: [value] });

/** The error a promise rejected with (fails the test when it was fulfilled). */
async function rejectionOf(promise: Promise<unknown>): Promise<unknown> {
  const [result] = await Promise.allSettled([promise]);
  if (result.status === 'fulfilled') throw new Error(`expected a rejection, got ${JSON.stringify(result.value)}`);
  return result.reason;
}

describe('StatementPipeline on a real PostgreSQL', () => {
  let env: TestEnvironment;
  let admin: pg.Client;
  let opened: StatementPipeline[] = [];

  beforeAll(async () => {
    env = await createTestEnvironment();
    admin = new pg.Client({ connectionString: env.databaseUrl });
    await admin.connect();
  }, 30_000);

  afterEach(async () => {
    await Promise.all(opened.map((pipeline) => pipeline.onApplicationShutdown()));
    opened = [];
    await waitUntil(async () => (await backends()).length === 0, 'the pipelines of the test to close');
  });

  afterAll(async () => {
    await admin?.end();
    await env?.dispose();
  }, 30_000);

  function open(connections: number, url = env.databaseUrl): StatementPipeline {
    const pipeline = new StatementPipeline(url, connections);
    opened.push(pipeline);
    return pipeline;
  }

  /** Process ids of the pipeline connections to the test database. */
  async function backends(): Promise<number[]> {
    const { rows } = await admin.query<{ pid: number }>(
      'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1',
      [PIPELINE_APPLICATION_NAME],
    );
    return rows.map((row) => row.pid);
  }

  it('opens no connection before its first statement, then as many as it was given', async () => {
    const sut = open(3);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await backends()).toEqual([]);

    await sut.query(echo(1));

    await waitUntil(async () => (await backends()).length === 3, 'three connections');
  });

  it('answers each of many statements sent at once with its own rows', async () => {
    const sut = open(2);
    const values = Array.from({ length: 500 }, (_, i) => i * 7);

    const answers = await Promise.all(values.map((value) => sut.query<{ n: number }>(echo(value))));

    expect(answers).toEqual(values.map((n) => [{ n }]));
  });

  it('sends the statements of one turn of the event loop in one write per connection', async () => {
    const sut = open(2);
    await sut.query(echo(0));
    await waitUntil(async () => (await backends()).length === 2, 'both connections');
    await Promise.all([sut.query(echo(0)), sut.query(echo(0))]);
    const original = { write: Socket.prototype._write, writev: Socket.prototype._writev };
    let writes = 0;
    Socket.prototype._write = function (this: Socket, ...args: Parameters<Socket['_write']>) {
      writes++;
      return original.write.apply(this, args);
    };
    Socket.prototype._writev = function (this: Socket, ...args: Parameters<NonNullable<Socket['_writev']>>) {
      writes++;
      return original.writev!.apply(this, args);
    };
    try {
      const answers = await Promise.all(Array.from({ length: 100 }, (_, i) => sut.query<{ n: number }>(echo(i))));

      expect(answers.map(([row]) => row.n)).toEqual(Array.from({ length: 100 }, (_, i) => i));
    } finally {
      Socket.prototype._write = original.write;
      Socket.prototype._writev = original.writev;
    }
    expect(writes).toBe(2);
  });

  it('fails only the statement that errs, also among statements sent together', async () => {
    const sut = open(1);

    const results = await Promise.allSettled([sut.query(echo(1)), sut.query(echo('one')), sut.query(echo(3))]);

    expect(results.map((result) => result.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[1] as PromiseRejectedResult).reason).toMatchObject({ code: '22P02' });
    expect((results[2] as PromiseFulfilledResult<unknown>).value).toEqual([{ n: 3 }]);
  });

  it('replaces a connection PostgreSQL ended: its statement fails as unavailable, later ones succeed', async () => {
    const sut = open(1);
    await sut.query(echo(1));
    const [pid] = await backends();
    const sleeping = sut.query({ name: 'sleep', text: 'SELECT pg_sleep($1)', values: [10] });
    await waitUntil(async () => {
      const { rows } = await admin.query(`SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND query LIKE '%pg_sleep%'`, [
        pid,
      ]);
      return rows.length === 1;
    }, 'the statement to run');

    await admin.query('SELECT pg_terminate_backend($1)', [pid]);

    expect(isUnavailable(await rejectionOf(sleeping))).toBe(true);
    let answer: unknown;
    await waitUntil(
      async () => {
        answer = await sut.query(echo(2)).catch((error: unknown) => {
          if (isUnavailable(error)) return undefined;
          throw error;
        });
        return answer !== undefined;
      },
      'a statement to succeed again',
      5000,
    );
    expect(answer).toEqual([{ n: 2 }]);
    const now = await backends();
    expect(now).toHaveLength(1);
    expect(now[0]).not.toBe(pid);
  }, 30_000);

  it('fails as unavailable while PostgreSQL cannot be reached, trying again for each statement', async () => {
    const unreachable = new URL(env.databaseUrl);
    unreachable.port = String(await freePort());
    const sut = open(2, unreachable.toString());

    const errors = [await rejectionOf(sut.query(echo(1))), await rejectionOf(sut.query(echo(2)))];

    expect(errors.map(isUnavailable)).toEqual([true, true]);
    expect(errors.map((error) => (error as { code?: string }).code)).toEqual(['ECONNREFUSED', 'ECONNREFUSED']);
  });

  it('closes its connections at shutdown and then refuses statements as unavailable', async () => {
    const sut = open(2);
    await sut.query(echo(1));
    await waitUntil(async () => (await backends()).length === 2, 'both connections');

    await sut.onApplicationShutdown();

    await waitUntil(async () => (await backends()).length === 0, 'the connections to close');
    expect(isUnavailable(await rejectionOf(sut.query(echo(2))))).toBe(true);
  });
});

/** What a client of the database is told of a pipelined statement's failure (see `Database`). */
function isUnavailable(error: unknown): boolean {
  return translateDatabaseError(error) instanceof ServiceUnavailableError;
}
