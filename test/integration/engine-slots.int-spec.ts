import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Logger, type LoggerService } from '@nestjs/common';
import { Semaphore } from 'redis-semaphore';
import type { AppConfig } from '../../src/config/config.js';
import { ENGINE_SLOTS } from '../../src/jobs/engine-runs.js';
import { FAIL_FAST_OPTIONS, ServiceRedis } from '../../src/redis/redis.js';
import { EngineSlots } from '../../src/worker/engine-slots.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';

/** A lease renewed every 100 ms, so a slot freed elsewhere is noticed within the test's wait. */
const JOB_LOCK_MS = 300;

/** A job's engine slot against real Redis (redis-semaphore's sorted set), freed by another process as it runs. */
describe('EngineSlots', () => {
  let env: TestEnvironment;
  let redis: ServiceRedis;
  let slots: EngineSlots;
  const logged: { level: 'warn' | 'debug'; message: string }[] = [];

  beforeAll(async () => {
    env = await createTestEnvironment();
    redis = new ServiceRedis(env.redisUrl, { ...FAIL_FAST_OPTIONS, keyPrefix: `${env.redisPrefix}:` });
    await once(redis, 'ready');
    slots = new EngineSlots(redis, { jobLockMs: JOB_LOCK_MS } as AppConfig);
    // The service logs `(fields, message)`, as its JsonLogger takes them.
    const capture: LoggerService = {
      log: () => {},
      error: () => {},
      warn: (_fields: unknown, message: string) => logged.push({ level: 'warn', message }),
      debug: (_fields: unknown, message: string) => logged.push({ level: 'debug', message }),
    };
    Logger.overrideLogger(capture);
  }, 30_000);

  afterAll(async () => {
    Logger.overrideLogger(false);
    redis?.disconnect();
    await env?.dispose();
  }, 30_000);

  /** Frees the job's slot as the process that deletes a job does (EngineRuns.abandon), and waits for renewals. */
  async function freeElsewhere(jobId: string): Promise<void> {
    const options = { identifier: jobId, acquiredExternally: true } as const;
    await new Semaphore(redis, `${ENGINE_SLOTS}gpu`, 1, options).release();
    await sleep(JOB_LOCK_MS * 2);
  }

  it('says nothing alarming when the slot of a job being stopped is freed by the process that ended it', async () => {
    logged.length = 0;
    const stopped = new AbortController();
    const jobId = randomUUID();
    const held = await slots.acquire('gpu', 1, jobId, stopped.signal);

    stopped.abort(new Error('item deleted'));
    await freeElsewhere(jobId);
    await held.release();

    expect(logged.filter((line) => line.level === 'warn')).toEqual([]);
    expect(logged).toContainEqual({ level: 'debug', message: 'the slot of a stopped job was freed elsewhere' });
  });

  /** The jobs holding a slot of `engine`, as Redis has them. */
  function holders(engine: string): Promise<string[]> {
    return redis.zrange(`semaphore:${ENGINE_SLOTS}${engine}`, 0, -1);
  }

  it('takes the slot again when a job takes its turn after freeing it, and keeps the next job waiting meanwhile', async () => {
    const engine = { engineName: 'retaken', concurrency: 1, timeoutMs: 60_000 };
    const [first, second] = [randomUUID(), randomUUID()];
    const sut = slots.turn(engine, first, new AbortController().signal);
    await sut.slot!.take();
    await sut.slot!.free();
    const afterFree = await holders('retaken');

    await sut.slot!.take();
    const afterRetake = await holders('retaken');
    const next = slots.turn(engine, second, new AbortController().signal);
    const order: string[] = [];
    const nextTaking = next.slot!.take().then(() => order.push('next job took the slot'));
    order.push('first job ends');
    await sut.end();
    await nextTaking;

    expect({ afterFree, afterRetake }).toEqual({ afterFree: [], afterRetake: [first] });
    expect(order).toEqual(['first job ends', 'next job took the slot']);
    expect(await holders('retaken')).toEqual([second]);
    await next.end();
  });

  it('warns when the slot of a job still running lapses', async () => {
    logged.length = 0;
    const jobId = randomUUID();
    const held = await slots.acquire('gpu', 1, jobId, new AbortController().signal);

    await freeElsewhere(jobId);
    await held.release();

    expect(logged).toContainEqual({ level: 'warn', message: 'an engine slot lapsed while its job ran' });
  });
});
