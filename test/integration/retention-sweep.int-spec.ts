import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AppConfig } from '../../src/config/config.js';
import type { JobLifecycle } from '../../src/jobs/job-lifecycle.js';
import { FAIL_FAST_OPTIONS, ServiceRedis } from '../../src/redis/redis.js';
import { RetentionSweep } from '../../src/worker/retention.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';

const INTERVAL_MS = 1_000;
const TICKS = 6;

/** The retention sweep's rounds against real Redis (its lock), with a lifecycle that counts them. */
describe('RetentionSweep', () => {
  let env: TestEnvironment;
  let redis: ServiceRedis;

  beforeAll(async () => {
    env = await createTestEnvironment();
    redis = new ServiceRedis(env.redisUrl, { ...FAIL_FAST_OPTIONS, keyPrefix: `${env.redisPrefix}:` });
    await once(redis, 'ready');
  }, 30_000);

  afterAll(async () => {
    redis?.disconnect();
    await env?.dispose();
  }, 30_000);

  it('sweeps on every tick of its interval, not every other one', async () => {
    let rounds = 0;
    const lifecycle = {
      expire: () => {
        rounds++;
        return Promise.resolve(0);
      },
    } as unknown as JobLifecycle;
    const config = { historyRetentionMs: 60_000, retentionSweepIntervalMs: INTERVAL_MS } as AppConfig;
    const sut = new RetentionSweep(lifecycle, redis, config);

    sut.onApplicationBootstrap();
    await sleep(TICKS * INTERVAL_MS + INTERVAL_MS / 2);
    await sut.onApplicationShutdown();

    // Every tick but, at most, one that the machine delayed past the lock; a lock as long as the interval made half.
    expect(rounds).toBeGreaterThanOrEqual(TICKS - 1);
  }, 20_000);
});
