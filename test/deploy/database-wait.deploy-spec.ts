import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { freePort } from '../support/service.js';
import { imageCommand, runToExit } from '../support/deployment.js';

const ROLES = ['all', 'api', 'worker', 'migrate'];

describe('Booting while PostgreSQL cannot be reached', () => {
  let env: TestEnvironment;

  beforeAll(async () => {
    env = await createTestEnvironment();
  }, 60_000);

  afterAll(async () => {
    await env?.dispose();
  }, 60_000);

  it('every role says it waits for PostgreSQL at its host and port, then gives up in plain words and exits non-zero, never showing the password', async () => {
    const databasePort = await freePort();
    // The roles run side by side: each waits out the whole boot wait (about 30 s).
    const runs = await Promise.all(
      ROLES.map(async (role) =>
        runToExit(
          imageCommand(),
          {
            ...env.serviceEnv,
            ROLE: role,
            LOG_LEVEL: 'info',
            PORT: String(await freePort()),
            METRICS_PORT: String(await freePort()),
            DATABASE_URL: `postgres://postgres:pa55-not-shown@127.0.0.1:${databasePort}/none`,
          },
          90_000,
        ),
      ),
    );

    const seen = runs.map((sut, index) => ({
      role: ROLES[index],
      exitedNonZero: sut.code !== null && sut.code !== 0,
      output: sut.output,
      lastLine: sut.output.trim().split('\n').at(-1),
    }));
    expect(seen).toEqual(
      ROLES.map((role) => ({
        role,
        exitedNonZero: true,
        output: expect.stringContaining(`Waiting for PostgreSQL at 127.0.0.1:${databasePort}`),
        lastLine: expect.stringMatching(
          new RegExp(`^Startup failed: Cannot connect to PostgreSQL at 127\\.0\\.0\\.1:${databasePort} .*DATABASE_URL`),
        ),
      })),
    );
    for (const sut of runs) expect(sut.output).not.toContain('pa55-not-shown');
  }, 100_000);
});
