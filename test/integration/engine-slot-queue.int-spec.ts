import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { Logger, type LoggerService } from '@nestjs/common';
import type { AppConfig } from '../../src/config/config.js';
import { EngineSlotQueue, type HeldSlot, type SlotServer } from '../../src/jobs/engine-slot-queue.js';
import { FAIL_FAST_OPTIONS, ServiceRedis } from '../../src/redis/redis.js';
import { EngineSlots } from '../../src/worker/engine-slots.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';

/** Leases renewed every 500 ms: long enough for a loaded machine, short enough for a dead holder's test. */
const JOB_LOCK_MS = 1500;
/** How often `until` looks again. */
const POLL_MS = 10;

/**
 * Engine slots against real Redis, each EngineSlotQueue standing for a worker process of its own (its own connections,
 * its own channel), as workers on several machines would.
 */
describe('EngineSlotQueue', () => {
  let env: TestEnvironment;
  let redis: ServiceRedis;
  const workers: { sut: EngineSlotQueue; redis: ServiceRedis }[] = [];
  const logged: { level: 'warn' | 'debug'; message: string }[] = [];

  async function connect(): Promise<ServiceRedis> {
    const connection = new ServiceRedis(env.redisUrl, { ...FAIL_FAST_OPTIONS, keyPrefix: `${env.redisPrefix}:` });
    connection.on('error', () => {});
    await once(connection, 'ready');
    return connection;
  }

  /** A worker process's slots. */
  async function worker(): Promise<EngineSlotQueue> {
    const connection = await connect();
    const sut = new EngineSlotQueue(connection, { jobLockMs: JOB_LOCK_MS, redisPrefix: env.redisPrefix } as AppConfig);
    workers.push({ sut, redis: connection });
    return sut;
  }

  /** An engine of its own for each test, with one server of `capacity` slots. */
  function engineOf(capacity: number): { engine: string; servers: SlotServer[] } {
    return { engine: `gpu-${randomUUID()}`, servers: [{ name: 'gpu-1', capacity, healthy: true }] };
  }

  async function until(what: string, condition: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await condition())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await sleep(POLL_MS);
    }
  }

  /** Jobs waiting in the engine's queue, across all workers. */
  const queued = (engine: string) => redis.zcard(`engine-slots:${engine}:queue`);

  /** Starts an acquire and resolves once it waits in the queue (its place is then fixed), with its acquire. */
  async function enqueue(
    sut: EngineSlotQueue,
    engine: string,
    servers: SlotServer[],
    jobId: string,
    signal = new AbortController().signal,
  ): Promise<{ held: Promise<HeldSlot> }> {
    const before = await queued(engine);
    const acquiring = sut.acquire(engine, servers, jobId, signal);
    acquiring.catch(() => {});
    await until(`${jobId} to queue`, async () => (await queued(engine)) > before);
    return { held: acquiring };
  }

  beforeAll(async () => {
    env = await createTestEnvironment();
    redis = await connect();
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
    for (const { sut, redis: connection } of workers) {
      sut.onApplicationShutdown();
      connection.disconnect();
    }
    redis?.disconnect();
    await env?.dispose();
  }, 30_000);

  it('serves waiters in the order they came, across workers', async () => {
    const [a, b, c] = await Promise.all([worker(), worker(), worker()]);
    const { engine, servers } = engineOf(1);
    const first = await a.acquire(engine, servers, 'job-0', new AbortController().signal);
    const arrivals = ['job-1', 'job-2', 'job-3', 'job-4', 'job-5', 'job-6'];
    const served: string[] = [];
    const waits: Promise<void>[] = [];
    for (const [index, jobId] of arrivals.entries()) {
      // Each worker in turn, so that no worker's arrivals are next to each other.
      const { held } = await enqueue([b, c, a][index % 3], engine, servers, jobId);
      waits.push(
        held.then(async (slot) => {
          served.push(jobId);
          await slot.release();
        }),
      );
    }

    await first.release();
    await Promise.all(waits);

    expect(served).toEqual(arrivals);
  }, 30_000);

  it('serves first the job that began waiting first, when Redis reads its worker later', async () => {
    const [a, b, c] = await Promise.all([worker(), worker(), worker()]);
    const bConnection = workers.find((entry) => entry.sut === b)!.redis;
    const { engine, servers } = engineOf(1);
    const held = await a.acquire(engine, servers, 'job-held', new AbortController().signal);
    const served: string[] = [];
    const serve = async (slot: Promise<HeldSlot>, jobId: string) => {
      const taken = await slot;
      served.push(jobId);
      await taken.release();
    };

    // Worker b's connection is busy with a blocking read, so Redis gets its job's script after worker c's.
    const busy = bConnection.blpop('nothing-comes', 0.3);
    const early = serve(b.acquire(engine, servers, 'job-early', new AbortController().signal), 'job-early');
    const late = serve(c.acquire(engine, servers, 'job-late', new AbortController().signal), 'job-late');
    await busy;
    await until('both to queue', async () => (await queued(engine)) === 2);
    await held.release();
    await Promise.all([early, late]);

    expect(served).toEqual(['job-early', 'job-late']);
  }, 30_000);

  it('never lets more jobs hold slots than the servers take, whatever the race', async () => {
    const racers = await Promise.all([worker(), worker(), worker(), worker()]);
    const { engine, servers } = engineOf(3);
    let holding = 0;
    let most = 0;

    await Promise.all(
      Array.from({ length: 100 }, async (_, index) => {
        const slot = await racers[index % racers.length].acquire(
          engine,
          servers,
          `job-${index}`,
          new AbortController().signal,
        );
        holding++;
        most = Math.max(most, holding);
        // Held across a round trip of Redis, so that others' acquires and releases interleave with it.
        await redis.ping();
        holding--;
        await slot.release();
      }),
    );

    expect(most).toBe(3);
    expect(await queued(engine)).toBe(0);
  }, 30_000);

  it("hands a dead worker's slot to the oldest waiter once its lease lapses", async () => {
    const [doomed, other] = await Promise.all([worker(), worker()]);
    const { engine, servers } = engineOf(1);
    await doomed.acquire(engine, servers, 'job-stuck', new AbortController().signal);
    const { held: waiting } = await enqueue(other, engine, servers, 'job-next');

    // The process dies: nothing renews its lease, nothing frees its slot.
    doomed.onApplicationShutdown();

    expect((await waiting).server).toBe('gpu-1');
  }, 30_000);

  it('takes a waiter that gives up out of the queue: the next one gets the slot', async () => {
    const [a, b, c] = await Promise.all([worker(), worker(), worker()]);
    const { engine, servers } = engineOf(1);
    const held = await a.acquire(engine, servers, 'job-held', new AbortController().signal);
    const canceled = new AbortController();
    const { held: givingUp } = await enqueue(b, engine, servers, 'job-canceled', canceled.signal);
    const { held: next } = await enqueue(c, engine, servers, 'job-next');

    canceled.abort(new Error('canceled'));
    await expect(givingUp).rejects.toThrow('canceled');
    await until('the canceled waiter to leave', async () => (await queued(engine)) === 1);
    await held.release();
    const slot = await next;
    await slot.release();

    // Nothing holds a slot now: the one who gave up took none.
    const after = await a.acquire(engine, servers, 'job-after', new AbortController().signal);
    await after.release();
  }, 30_000);

  it('gives a waiter its slot when the notification is lost', async () => {
    const [a, b] = await Promise.all([worker(), worker()]);
    const { engine, servers } = engineOf(1);
    const held = await a.acquire(engine, servers, 'job-held', new AbortController().signal);
    const { held: waiting } = await enqueue(b, engine, servers, 'job-waiting');

    // Every subscriber of this test's workers cut off, and the slot freed at once: they reconnect no sooner than 200 ms
    // later (FAIL_FAST_OPTIONS' retry strategy), so the handover's message reaches nobody.
    const clients = (await redis.client('LIST')) as string;
    for (const line of clients.split('\n')) {
      const id =
        / name=(\S+)/.exec(line)?.[1]?.startsWith(`${env.redisPrefix}:engine-slots:`) && /^id=(\d+)/.exec(line);
      if (id) await redis.client('KILL', 'ID', id[1]);
    }
    await held.release();

    expect((await waiting).server).toBe('gpu-1');
  }, 30_000);

  it("queues again a waiter passed over while its worker's lease had lapsed, and serves it", async () => {
    const [a, b] = await Promise.all([worker(), worker()]);
    const { engine, servers } = engineOf(1);
    const held = await a.acquire(engine, servers, 'job-held', new AbortController().signal);
    const { held: waiting } = await enqueue(b, engine, servers, 'job-waiting');

    // Every worker's lease gone, as if none had renewed it: the freed slot passes b's waiter over.
    await redis.del('engine-slots:processes');
    await held.release();
    expect(await queued(engine)).toBe(0);

    expect((await waiting).server).toBe('gpu-1');
  }, 30_000);

  it('gives each job the healthy server with the most free slots, ties to the least recently used', async () => {
    const sut = await worker();
    const engine = `pool-${randomUUID()}`;
    const servers: SlotServer[] = [
      { name: 'a', capacity: 2, healthy: true },
      { name: 'b', capacity: 2, healthy: true },
      { name: 'c', capacity: 1, healthy: true },
      { name: 'down', capacity: 4, healthy: false },
    ];
    const take = (jobId: string) => sut.acquire(engine, servers, jobId, new AbortController().signal);

    const slots: HeldSlot[] = [];
    for (let index = 0; index < 5; index++) slots.push(await take(`job-${index}`));
    const { held: last } = await enqueue(sut, engine, servers, 'job-5');
    await slots[1].release();

    expect(slots.map((slot) => slot.server)).toEqual(['a', 'b', 'c', 'a', 'b']);
    expect((await last).server).toBe('b');
  }, 30_000);

  it('forgets the slots and queue places of jobs, from a process that holds none, and hands the slot on', async () => {
    const [a, b, c, cli] = await Promise.all([worker(), worker(), worker(), worker()]);
    const { engine, servers } = engineOf(1);
    logged.length = 0;
    await a.acquire(engine, servers, 'job-held', new AbortController().signal);
    const { held: next } = await enqueue(b, engine, servers, 'job-next');
    const stopped = new AbortController();
    await enqueue(c, engine, servers, 'job-removed', stopped.signal);
    await enqueue(c, engine, servers, 'job-after', stopped.signal);

    expect(await cli.forget(['job-held', 'job-removed'])).toBe(2);

    expect((await next).server).toBe('gpu-1');
    expect(await queued(engine)).toBe(1);
    // The holder's worker learns at its next look that its slot went, and says so: its job was not stopped.
    await until('the holder to notice', () =>
      logged.some((line) => line.message === 'an engine slot lapsed while its job ran'),
    );
    stopped.abort(new Error('test over'));
  }, 30_000);

  it('says nothing alarming when the slot of a job being stopped is freed by the process that ended it', async () => {
    const sut = await worker();
    const { engine, servers } = engineOf(1);
    logged.length = 0;
    const stopped = new AbortController();
    const held = await sut.acquire(engine, servers, 'job-stopped', stopped.signal);

    stopped.abort(new Error('item deleted'));
    await sut.forget(['job-stopped'], engine);
    await until('the holder to notice', () =>
      logged.some((line) => line.message === 'the slot of a stopped job was freed elsewhere'),
    );
    await held.release();

    expect(logged.filter((line) => line.level === 'warn')).toEqual([]);
  }, 30_000);

  it('takes the slot again when a job takes its turn after freeing it (a ComfyUI prompt re-queued), keeping the next job waiting', async () => {
    const slots = new EngineSlots(await worker());
    const engine = { engineName: `retaken-${randomUUID()}`, concurrency: 1, timeoutMs: 60_000 };
    const holders = () => redis.hkeys(`engine-slots:${engine.engineName}:holders`);
    const [first, second] = [randomUUID(), randomUUID()];
    const sut = slots.turn(engine, first, new AbortController().signal);
    await sut.slot!.take();
    await sut.slot!.free();
    const afterFree = await holders();

    await sut.slot!.take();
    const afterRetake = await holders();
    const next = slots.turn(engine, second, new AbortController().signal);
    const order: string[] = [];
    const nextTaking = next.slot!.take().then(() => order.push('next job took the slot'));
    order.push('first job ends');
    await sut.end();
    await nextTaking;

    expect({ afterFree, afterRetake }).toEqual({ afterFree: [], afterRetake: [first] });
    expect(order).toEqual(['first job ends', 'next job took the slot']);
    expect(await holders()).toEqual([second]);
    await next.end();
  }, 30_000);
});
