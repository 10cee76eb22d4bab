import { join } from 'node:path';
import { lookupPrefix } from '../../../src/common/api-key.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { freePort, runCli, type RunningService, startService } from '../../support/service.js';

/** Each command line run boots Nest and connects to the database: about a second on a quiet machine. */
const CLI_TIMEOUT_MS = 30_000;
const KEY_LINE = /^igs_[0-9A-Za-z]{40}\n$/;

describe('API key command line', () => {
  let env: TestEnvironment;
  let service: RunningService;

  beforeAll(async () => {
    env = await createTestEnvironment();
    // The service migrates the fresh database; without an auth cache a revocation applies at once.
    service = await startService({ ...env.serviceEnv, AUTH_CACHE_TTL_MS: '0' });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
    await env?.dispose();
  }, 60_000);

  function sut(...args: string[]) {
    return runCli(args, env.serviceEnv);
  }

  async function statusWithKey(key: string): Promise<number> {
    const response = await fetch(`${service.baseUrl}/generation/tools`, {
      headers: { authorization: `Bearer ${key}` },
    });
    await response.arrayBuffer();
    return response.status;
  }

  async function createKey(user: string): Promise<string> {
    const result = await sut('create', '--user', user);
    expect(result).toMatchObject({ code: 0 });
    expect(result.stdout).toMatch(KEY_LINE);
    return result.stdout.trim();
  }

  describe('create', () => {
    it(
      'prints exactly one line, the key, and nothing else',
      async () => {
        const result = await sut('create', '--user', 'alice');

        expect(result.code).toBe(0);
        expect(result.stdout).toMatch(KEY_LINE);
        expect(result.stdout.split('\n')).toHaveLength(2);
        expect(result.stderr).toBe('');
      },
      CLI_TIMEOUT_MS,
    );

    it(
      'makes a key that works against the service',
      async () => {
        const key = await createKey('alice');

        expect(await statusWithKey(key)).toBe(200);
      },
      CLI_TIMEOUT_MS,
    );

    it(
      'makes a different working key each time for the same user',
      async () => {
        const first = await createKey('alice');
        const second = await createKey('alice');

        expect(second).not.toBe(first);
        expect(await statusWithKey(first)).toBe(200);
        expect(await statusWithKey(second)).toBe(200);
      },
      CLI_TIMEOUT_MS,
    );

    it(
      'answers with usage and exit code 2 without --user',
      async () => {
        const result = await sut('create');

        expect(result.code).toBe(2);
        expect(result.stdout).toBe('');
        expect(result.stderr).toContain('Usage');
      },
      CLI_TIMEOUT_MS,
    );
  });

  describe('list', () => {
    it(
      'shows each key by prefix with its user, and never a full key',
      async () => {
        const aliceKey = await createKey('alice');
        const bobKey = await createKey('bob');

        const result = await sut('list');

        expect(result.code).toBe(0);
        const lines = result.stdout.trim().split('\n');
        const aliceLine = lines.find((line) => line.startsWith(lookupPrefix(aliceKey)));
        const bobLine = lines.find((line) => line.startsWith(lookupPrefix(bobKey)));
        expect(aliceLine).toContain('alice');
        expect(bobLine).toContain('bob');
        expect(result.stdout).not.toContain(aliceKey);
        expect(result.stdout).not.toContain(bobKey);
        expect(result.stdout).not.toMatch(/igs_[0-9A-Za-z]{9,}/);
      },
      CLI_TIMEOUT_MS,
    );
  });

  describe('revoke', () => {
    it(
      'revokes a key by its prefix, after which the key gets 401',
      async () => {
        const key = await createKey('carol');
        const otherKey = await createKey('carol');
        expect(await statusWithKey(key)).toBe(200);

        const result = await sut('revoke', lookupPrefix(key));

        expect(result.code).toBe(0);
        expect(result.stdout).not.toContain(key);
        expect(await statusWithKey(key)).toBe(401);
        expect(await statusWithKey(otherKey)).toBe(200);
      },
      CLI_TIMEOUT_MS,
    );

    it(
      'shows a revoked key as revoked in the list',
      async () => {
        const key = await createKey('dave');
        await sut('revoke', lookupPrefix(key));

        const result = await sut('list');

        const line = result.stdout.split('\n').find((l) => l.startsWith(lookupPrefix(key)));
        expect(line).toContain('revoked');
      },
      CLI_TIMEOUT_MS,
    );

    it(
      'revokes a key given whole',
      async () => {
        const key = await createKey('erin');

        const result = await sut('revoke', key);

        expect(result.code).toBe(0);
        expect(await statusWithKey(key)).toBe(401);
      },
      CLI_TIMEOUT_MS,
    );

    it(
      'refuses a whole key that is not one, revoking nothing, not even the key that shares its prefix',
      async () => {
        const key = await createKey('gina');
        // A typo in the secret part: the same prefix, another key.
        const last = key.at(-1) === 'a' ? 'b' : 'a';
        const mistyped = `${key.slice(0, -1)}${last}`;

        const result = await sut('revoke', mistyped);

        expect(result.code).toBe(1);
        expect(result.stdout).toBe('');
        expect(result.stderr).toContain('No active key is the key given');
        expect(result.stderr).not.toContain(mistyped);
        expect(await statusWithKey(key)).toBe(200);
      },
      CLI_TIMEOUT_MS,
    );

    it(
      'exits 1 for an unknown prefix',
      async () => {
        const result = await sut('revoke', 'igs_00000000');

        expect(result.code).toBe(1);
        expect(result.stderr).not.toBe('');
      },
      CLI_TIMEOUT_MS,
    );

    it(
      'exits 1 for a key that is already revoked',
      async () => {
        const key = await createKey('frank');
        expect((await sut('revoke', lookupPrefix(key))).code).toBe(0);

        const result = await sut('revoke', lookupPrefix(key));

        expect(result.code).toBe(1);
      },
      CLI_TIMEOUT_MS,
    );
  });

  describe('without DATABASE_URL', () => {
    it(
      'says on stderr that it uses the embedded database, and where, leaving stdout as it was',
      async () => {
        const dir = join(env.dataDir, 'pglite');
        const embeddedEnv = {
          ...Object.fromEntries(Object.entries(env.serviceEnv).filter(([name]) => name !== 'DATABASE_URL')),
          EMBEDDED_DB_DIR: dir,
          EMBEDDED_DB_PORT: String(await freePort()),
        };
        const notice = `igs: DATABASE_URL is unset: using the embedded database in ${dir}\n`;

        const created = await runCli(['keys', 'create', '--user', 'local'], embeddedEnv);
        const listed = await runCli(['keys', 'list'], embeddedEnv);

        expect(created).toMatchObject({ code: 0, stderr: notice });
        expect(created.stdout).toMatch(KEY_LINE);
        expect(listed).toMatchObject({ code: 0, stderr: notice });
        expect(listed.stdout).toMatch(/^igs_\w{8}\tlocal\t.*\tactive\n$/);
      },
      2 * CLI_TIMEOUT_MS,
    );
  });

  it(
    'names PostgreSQL and where it tried, never the password, when the database cannot be reached',
    async () => {
      const port = await freePort();

      const result = await runCli(['keys', 'list'], {
        ...env.serviceEnv,
        DATABASE_URL: `postgres://postgres:pa55-not-shown@127.0.0.1:${port}/none`,
      });

      expect(result.code).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toContain(`Cannot connect to PostgreSQL at 127.0.0.1:${port}`);
      expect(result.stderr).toContain('DATABASE_URL');
      expect(result.stderr).not.toContain('pa55-not-shown');
    },
    2 * CLI_TIMEOUT_MS,
  );

  it(
    'prints usage and exits 2 without arguments',
    async () => {
      const result = await sut();

      expect(result.code).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toContain('Usage');
      expect(result.stderr).toMatch(/create/);
      expect(result.stderr).toMatch(/list/);
      expect(result.stderr).toMatch(/revoke/);
    },
    CLI_TIMEOUT_MS,
  );

  it(
    'prints usage and exits 2 for an unknown command',
    async () => {
      const result = await sut('delete-everything');

      expect(result.code).toBe(2);
      expect(result.stderr).toContain('Usage');
    },
    CLI_TIMEOUT_MS,
  );
});
