import { once } from 'node:events';
import type { AppConfig } from '../../src/config/config.js';
import type { JobEvents } from '../../src/jobs/job-events.js';
import { QueueLine } from '../../src/jobs/queue-line.js';
import { FAIL_FAST_OPTIONS, ServiceRedis } from '../../src/redis/redis.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { waitUntil } from '../support/harness.js';

/** Each engine's line of queued jobs, against a real Redis, as every process of a deployment shares it. */
describe('QueueLine', () => {
  let env: TestEnvironment;
  let redis: ServiceRedis;
  /** The engines whose line moved, as announced. */
  const moved: string[] = [];

  beforeAll(async () => {
    env = await createTestEnvironment();
    redis = new ServiceRedis(env.redisUrl, { ...FAIL_FAST_OPTIONS, keyPrefix: `${env.redisPrefix}:` });
    redis.on('error', () => {});
    await once(redis, 'ready');
  }, 30_000);

  afterAll(async () => {
    redis.disconnect();
    await env.dispose();
  }, 30_000);

  /** A process's QueueLine; each process throttles its own announcements. */
  function lineOfAProcess(): QueueLine {
    const events = { announceLineMoved: (engine: string) => Promise.resolve(moved.push(engine)) };
    return new QueueLine(redis, events as unknown as JobEvents, { redisPrefix: env.redisPrefix } as AppConfig);
  }

  it('numbers the jobs of each engine in the order they joined, and moves them up as jobs ahead leave', async () => {
    const api = lineOfAProcess();
    const worker = lineOfAProcess();
    for (const id of ['a1', 'a2', 'a3']) await api.join(id, 'gpu-a', 'alice');
    await api.join('a4', 'gpu-a', 'bob');
    await api.join('b1', 'gpu-b', 'alice');

    expect(await api.positions(['a1', 'a2', 'a3', 'a4', 'b1', 'unknown'])).toEqual(
      new Map([
        ['a1', 1],
        ['a2', 2],
        ['a3', 3],
        ['a4', 4],
        ['b1', 1],
      ]),
    );

    // a1 starts in a worker, a3 is canceled through the API: both out of turn for a3.
    await worker.leave('a1');
    await api.leave('a3');
    expect(await api.positions(['a1', 'a2', 'a3', 'a4', 'b1'])).toEqual(
      new Map([
        ['a2', 1],
        ['a4', 2],
        ['b1', 1],
      ]),
    );
    expect(moved).toEqual(['gpu-a', 'gpu-a']);
    // A user's queued jobs, whatever their engine: what a user's event stream reads when a line moves.
    expect(await api.positionsOfUser('alice')).toEqual(
      new Map([
        ['a2', 1],
        ['b1', 1],
      ]),
    );
    expect(await api.positionsOfUser('bob')).toEqual(new Map([['a4', 2]]));
  });

  it('keeps the place of a job that joins again (queued twice), and behind the ones before a job that left', async () => {
    const sut = lineOfAProcess();
    await sut.join('c1', 'gpu-c', 'carol');
    await sut.join('c2', 'gpu-c', 'carol');

    await sut.join('c1', 'gpu-c', 'carol');
    await sut.leave('c1');
    await sut.join('c1', 'gpu-c', 'carol');

    expect(await sut.positions(['c1', 'c2'])).toEqual(
      new Map([
        ['c2', 1],
        ['c1', 2],
      ]),
    );
  });

  it('announces at most one move at once per engine, and the moves that came meanwhile once after', async () => {
    moved.length = 0;
    const sut = lineOfAProcess();
    for (const id of ['d1', 'd2', 'd3']) await sut.join(id, 'gpu-d', 'dave');

    for (const id of ['d1', 'd2', 'd3']) await sut.leave(id);
    const atOnce = [...moved];
    await waitUntil(() => moved.length > 1, 'the move held back');

    expect(atOnce).toEqual(['gpu-d']);
    expect(moved).toEqual(['gpu-d', 'gpu-d']);
    sut.onApplicationShutdown();
  });

  it('takes nothing out and announces nothing for a job in no line', async () => {
    moved.length = 0;
    const sut = lineOfAProcess();

    await sut.leave('never-queued');

    expect(moved).toEqual([]);
    expect(await sut.positions([])).toEqual(new Map());
    expect(await sut.positionsOfUser('nobody')).toEqual(new Map());
  });
});
