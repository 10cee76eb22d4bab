import { setTimeout as sleep } from 'node:timers/promises';
import { bearer, type ProblemBody, postJob } from '../../support/client.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { inputsFor } from '../../support/jobs.js';
import { runCli, type RunningService, startService } from '../../support/service.js';

/** Each run of the command line boots Nest and connects to the database. */
const CLI_TIMEOUT_MS = 30_000;
/** A change of limits applies in every process within this (OPERATIONS.md). */
const LIMITS_APPLY_MS = 10_000;
/** What `igs users list` shows of a user's limits while the defaults apply (the service's, as set below). */
const DEFAULT_SHARES = ['4 (default)', '20 (default)', '20 (default)'];

describe('igs', () => {
  let env: TestEnvironment;
  let service: RunningService;
  /** The service's environment, which the command line reads as well. */
  let serviceEnv: Record<string, string>;

  beforeAll(async () => {
    env = await createTestEnvironment();
    // An API process alone: every job stays pending. Defaults far from the limits the tests set, so that a refusal is
    // the user's own limit's.
    serviceEnv = { ...env.serviceEnv, LIMIT_MAX_PENDING: '100', LIMIT_CREATIONS_PER_MINUTE: '1000' };
    service = await startService({ ...serviceEnv, ROLE: 'api' });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
    await env?.dispose();
  }, 60_000);

  function sut(...args: string[]) {
    return runCli(args, serviceEnv);
  }

  async function createKey(user: string, ...flags: string[]): Promise<string> {
    const result = await sut('keys', 'create', '--user', user, ...flags);
    expect(result).toMatchObject({ code: 0, stderr: '' });
    return result.stdout.trim();
  }

  async function submit(key: string): Promise<{ status: number; problem?: ProblemBody }> {
    const response = await postJob(service.baseUrl, key, await inputsFor('default'));
    const body = (await response.json()) as ProblemBody;
    return response.status === 202 ? { status: 202 } : { status: response.status, problem: body };
  }

  /** Submits until an answer passes `check`, as a client would, for at most LIMITS_APPLY_MS. */
  async function submitUntil(key: string, check: (answer: { status: number; problem?: ProblemBody }) => boolean) {
    const deadline = Date.now() + LIMITS_APPLY_MS;
    for (;;) {
      const answer = await submit(key);
      if (check(answer) || Date.now() > deadline) return answer;
      await sleep(250);
    }
  }

  async function userLine(name: string): Promise<string[]> {
    const result = await sut('users', 'list');
    expect(result.code).toBe(0);
    return (
      result.stdout
        .split('\n')
        .find((line) => line.startsWith(`${name}\t`))
        ?.split('\t') ?? []
    );
  }

  it.each([
    [[]],
    [['keys']],
    [['keys', 'create']],
    [['keys', 'create', '--user']],
    [['keys', 'create', '--user', 'ann', '--root']],
    [['keys', 'revoke']],
    [['keys', 'list', 'extra']],
    [['users', 'delete']],
    [['users', 'delete', 'ann', 'bob', '--yes']],
    [['users', 'remove', 'ann']],
    [['limits', 'set', '--user', 'ann']],
    [['limits', 'set', '--user', 'ann', '--pending', '0']],
    [['limits', 'set', '--user', 'ann', '--pending', '2', '--per-minute', 'many']],
    [['limits', 'reset']],
    [['frobnicate']],
  ])(
    'prints the usage and exits 2 for %j',
    async (args) => {
      const result = await sut(...args);

      expect(result.code).toBe(2);
      expect(result.stdout).toBe('');
      expect(result.stderr).toContain('Usage: igs');
    },
    CLI_TIMEOUT_MS,
  );

  it(
    'changes nothing when one of the arguments is wrong',
    async () => {
      await createKey('half');

      const result = await sut('limits', 'set', '--user', 'half', '--pending', '3', '--per-minute', '-1');

      expect(result.code).toBe(2);
      expect((await userLine('half')).slice(4)).toEqual(['100 (default)', '1000 (default)', ...DEFAULT_SHARES]);
    },
    CLI_TIMEOUT_MS,
  );

  it(
    'creates an admin key, listed as such, that works as any key does',
    async () => {
      const admin = await createKey('operator', '--admin');
      const plain = await createKey('operator');

      const lines = (await sut('keys', 'list')).stdout.split('\n');

      expect(lines.find((line) => line.startsWith(admin.slice(0, 12)))).toMatch(/\toperator\t.*\tactive\tadmin$/);
      expect(lines.find((line) => line.startsWith(plain.slice(0, 12)))).toMatch(/\toperator\t.*\tactive$/);
      expect((await submit(admin)).status).toBe(202);
    },
    CLI_TIMEOUT_MS,
  );

  it(
    "sets a user's pending limit, in effect in the running service within 10 s, and resets it to the default",
    async () => {
      const key = await createKey('limited');
      // The service has read (and keeps) the user's limits: the defaults.
      expect((await submit(key)).status).toBe(202);

      const set = await sut('limits', 'set', '--user', 'limited', '--pending', '1');
      expect(set.code).toBe(0);

      const refused = await submitUntil(key, (answer) => answer.status === 429);
      expect(refused).toMatchObject({ status: 429, problem: { code: 'too_many_pending' } });
      expect(refused.problem?.detail).toBe('At most 1 job may be pending at once; wait for some to finish.');
      expect((await userLine('limited')).slice(4)).toEqual(['1', '1000 (default)', ...DEFAULT_SHARES]);

      expect((await sut('limits', 'reset', '--user', 'limited')).code).toBe(0);

      expect((await submitUntil(key, (answer) => answer.status === 202)).status).toBe(202);
      expect((await userLine('limited')).slice(4)).toEqual(['100 (default)', '1000 (default)', ...DEFAULT_SHARES]);
    },
    3 * CLI_TIMEOUT_MS,
  );

  it(
    "sets a user's share at once of uploads, event streams and held requests, in effect in the running service within 10 s",
    async () => {
      const key = await createKey('streamer');
      const open = () => fetch(`${service.baseUrl}/user/events`, { headers: bearer(key) });
      /** Opens a second stream beside `first` until its answer passes `check`, for at most LIMITS_APPLY_MS. */
      const secondUntil = async (check: (status: number) => boolean) => {
        const deadline = Date.now() + LIMITS_APPLY_MS;
        for (;;) {
          const second = await open();
          let body: ProblemBody | undefined;
          if (second.status === 200) await second.body?.cancel();
          else body = (await second.json()) as ProblemBody;
          if (check(second.status) || Date.now() > deadline) return { status: second.status, problem: body };
          await sleep(250);
        }
      };
      // The service has read (and keeps) the user's limits: the defaults, 20 streams.
      const first = await open();
      expect(first.status).toBe(200);
      try {
        expect((await secondUntil((status) => status === 200)).status).toBe(200);

        const set = await sut('limits', 'set', '--user', 'streamer', '--streams', '1', '--uploads', '3', '--held', '2');
        expect(set.code).toBe(0);

        const refused = await secondUntil((status) => status === 429);
        expect(refused).toMatchObject({
          status: 429,
          problem: {
            code: 'too_many_concurrent_requests',
            detail: 'At most 1 event stream may be open at once; close one first.',
          },
        });
        expect((await userLine('streamer')).slice(4)).toEqual(['100 (default)', '1000 (default)', '3', '1', '2']);

        expect((await sut('limits', 'reset', '--user', 'streamer')).code).toBe(0);

        expect((await secondUntil((status) => status === 200)).status).toBe(200);
        expect((await userLine('streamer')).slice(4)).toEqual(['100 (default)', '1000 (default)', ...DEFAULT_SHARES]);
      } finally {
        await first.body?.cancel();
      }
    },
    3 * CLI_TIMEOUT_MS,
  );

  it(
    'gives a user with --pending 1 a 429 too_many_pending on the second job',
    async () => {
      const key = await createKey('single');
      expect((await sut('limits', 'set', '--user', 'single', '--pending', '1')).code).toBe(0);

      expect((await submit(key)).status).toBe(202);
      expect(await submit(key)).toMatchObject({ status: 429, problem: { code: 'too_many_pending' } });
    },
    CLI_TIMEOUT_MS,
  );

  it(
    "sets a user's creations a minute",
    async () => {
      const key = await createKey('slow');
      expect((await sut('limits', 'set', '--user', 'slow', '--per-minute', '1')).code).toBe(0);

      expect((await submit(key)).status).toBe(202);
      expect(await submit(key)).toMatchObject({
        status: 429,
        problem: {
          code: 'rate_limited',
          detail: expect.stringMatching(/^At most 1 job creation a minute; retry in \d+ s\.$/),
        },
      });
    },
    CLI_TIMEOUT_MS,
  );

  it(
    'lists users with their items, pending items and limits',
    async () => {
      const key = await createKey('counted');
      await submit(key);
      await submit(key);

      const [name, created, items, pending] = await userLine('counted');

      expect(name).toBe('counted');
      expect(new Date(created).getTime()).not.toBeNaN();
      expect([items, pending]).toEqual(['2', '2']);
    },
    CLI_TIMEOUT_MS,
  );

  it(
    'exits 1 naming the user when there is no such user, creating none',
    async () => {
      const result = await sut('limits', 'set', '--user', 'nobody', '--pending', '2');

      expect(result.code).toBe(1);
      expect(result.stderr).toContain('nobody');
      expect(await userLine('nobody')).toEqual([]);
    },
    CLI_TIMEOUT_MS,
  );
});
