import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { DomainError } from '../../src/common/problem.js';
import { CreationRateLimit } from '../../src/generation/limits.js';
import type { UserLimits } from '../../src/users/user-limits.js';
import { FAIL_FAST_OPTIONS, ServiceRedis } from '../../src/redis/redis.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';

const LIMIT = 3;
const MINUTE = 60_000;
/** A minute far from now, so the simulated clock's counters are the test's own. */
const BASE = (Math.floor(Date.now() / MINUTE) + 10_000) * MINUTE;

/** The creation rate limit against real Redis (its Lua window), with the clock the test sets. */
describe('CreationRateLimit', () => {
  let env: TestEnvironment;
  let redis: ServiceRedis;
  let sut: CreationRateLimit;

  beforeAll(async () => {
    env = await createTestEnvironment();
    redis = new ServiceRedis(env.redisUrl, { ...FAIL_FAST_OPTIONS, keyPrefix: `${env.redisPrefix}:` });
    await once(redis, 'ready');
    const limits = { of: () => Promise.resolve({ maxPending: 10, creationsPerMinute: LIMIT }) };
    sut = new CreationRateLimit(redis, limits as unknown as UserLimits);
  }, 30_000);

  afterAll(async () => {
    redis?.disconnect();
    await env?.dispose();
  }, 30_000);

  /** The Retry-After seconds of a refused take, or undefined when the take went through. */
  async function retryAfterOfTake(userId: string, at: number): Promise<number | undefined> {
    try {
      await sut.take(userId, at);
      return undefined;
    } catch (error) {
      if (!(error instanceof DomainError) || error.code !== 'rate_limited') throw error;
      return Number(error.options.headers?.['Retry-After']);
    }
  }

  it.each([0, 10, 30, 50, 59])(
    'with %i s of the minute gone: the budget is spent, and a retry after exactly Retry-After is accepted',
    async (secondsIntoMinute) => {
      const user = randomUUID();
      const start = BASE + secondsIntoMinute * 1000;
      for (let i = 0; i < LIMIT; i++) expect(await retryAfterOfTake(user, start)).toBeUndefined();

      const retryAfter = await retryAfterOfTake(user, start);

      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(await retryAfterOfTake(user, start + (retryAfter! - 1) * 1000)).toBeDefined();
      expect(await retryAfterOfTake(user, start + retryAfter! * 1000)).toBeUndefined();
    },
  );

  it('does not hand out a second budget when a burst crosses a minute boundary', async () => {
    const user = randomUUID();
    for (let i = 0; i < LIMIT; i++) expect(await retryAfterOfTake(user, BASE + 58_000)).toBeUndefined();

    // Right after the minute turns, the previous minute's three creations still weigh almost fully.
    expect(await retryAfterOfTake(user, BASE + MINUTE + 2_000)).toBeDefined();
    // Once a third of the new minute is gone, one creation's worth of the old one has slid out.
    expect(await retryAfterOfTake(user, BASE + MINUTE + 20_000)).toBeUndefined();
    expect(await retryAfterOfTake(user, BASE + MINUTE + 20_000)).toBeDefined();
  });

  it('gives a refunded creation back to the budget', async () => {
    const user = randomUUID();
    const tickets = [];
    for (let i = 0; i < LIMIT; i++) tickets.push(await sut.take(user, BASE + 5_000));

    await sut.refund(tickets[0]);

    expect(await retryAfterOfTake(user, BASE + 5_000)).toBeUndefined();
    expect(await retryAfterOfTake(user, BASE + 5_000)).toBeDefined();
  });
});
