import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import type { ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { DomainError } from '../../src/common/problem.js';
import { FAIL_FAST_OPTIONS, ServiceRedis } from '../../src/redis/redis.js';
import { FAIR_SHARE, FairShare, type Share } from '../../src/users/fair-share.js';
import type { Limits, UserLimits } from '../../src/users/user-limits.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';

const LIMITS: Limits = {
  maxPending: 10,
  creationsPerMinute: 60,
  concurrentUploads: 2,
  eventStreams: 3,
  heldRequests: 1,
};
/** Short leases, so that a "crashed" process's leases lapse within the test. */
const LEASE_MS = 300;

/** A response as FairShare sees one: it closes once, whoever closes it. */
class FakeResponse extends EventEmitter {
  closed = false;

  close(): void {
    this.closed = true;
    this.emit('close');
  }
}

/** Users' shares against real Redis, taken by several processes (each its own FairShare and connection). */
describe('FairShare', () => {
  let env: TestEnvironment;
  const connections: ServiceRedis[] = [];
  const processes: FairShare[] = [];

  beforeAll(async () => {
    env = await createTestEnvironment();
  }, 30_000);

  afterAll(async () => {
    for (const process of processes) process.onApplicationShutdown();
    for (const redis of connections) redis.disconnect();
    await env?.dispose();
  }, 30_000);

  /** A process of the service: a connection of its own, with the lease length given. */
  async function startProcess(leaseMs = LEASE_MS): Promise<{ sut: FairShare; redis: ServiceRedis }> {
    const redis = new ServiceRedis(env.redisUrl, { ...FAIL_FAST_OPTIONS, keyPrefix: `${env.redisPrefix}:` });
    connections.push(redis);
    await once(redis, 'ready');
    const limits = { of: () => Promise.resolve(LIMITS) } as unknown as UserLimits;
    const sut = new FairShare(redis, limits, leaseMs);
    processes.push(sut);
    return { sut, redis };
  }

  /** Takes a share for a fresh request; resolves its response, or the refusal. */
  async function take(sut: FairShare, user: string, share: Share): Promise<FakeResponse | DomainError> {
    const response = new FakeResponse();
    try {
      await sut.take(user, share, response as unknown as ServerResponse);
      return response;
    } catch (error) {
      if (error instanceof DomainError) return error;
      throw error;
    }
  }

  async function holdAll(sut: FairShare, user: string, share: Share, n: number): Promise<FakeResponse[]> {
    const held: FakeResponse[] = [];
    for (let i = 0; i < n; i++) {
      const response = await take(sut, user, share);
      if (!(response instanceof FakeResponse)) throw new Error(`take ${i + 1} of ${n} was refused: ${response.detail}`);
      held.push(response);
    }
    return held;
  }

  function expectRefused(answer: FakeResponse | DomainError, detail: string): void {
    expect(answer).toBeInstanceOf(DomainError);
    const error = answer as DomainError;
    expect(error.code).toBe('too_many_concurrent_requests');
    expect(error.status).toBe(429);
    expect(error.detail).toBe(detail);
    expect(Number(error.options.headers?.['Retry-After'])).toBeGreaterThanOrEqual(1);
  }

  it('shares one count between processes, per user and per share', async () => {
    const [a, b] = [await startProcess(), await startProcess()];
    const user = randomUUID();
    await holdAll(a.sut, user, 'streams', 2);
    await holdAll(b.sut, user, 'streams', 1);

    expectRefused(await take(a.sut, user, 'streams'), 'At most 3 event streams may be open at once; close one first.');
    expectRefused(await take(b.sut, user, 'streams'), 'At most 3 event streams may be open at once; close one first.');
    // Another user, and another share of the same user, are counted apart.
    expect(await take(b.sut, randomUUID(), 'streams')).toBeInstanceOf(FakeResponse);
    expect(await take(b.sut, user, 'uploads')).toBeInstanceOf(FakeResponse);
  });

  it('gives a share back when its response closes, or when let go earlier, once', async () => {
    const { sut } = await startProcess();
    const user = randomUUID();
    const [first] = await holdAll(sut, user, 'uploads', 2);
    expectRefused(
      await take(sut, user, 'uploads'),
      'At most 2 uploads may be in progress at once; retry when one has ended.',
    );

    first.close();
    first.close();

    const third = await take(sut, user, 'uploads');
    expect(third).toBeInstanceOf(FakeResponse);
    // The closed response gave back one share, not two.
    expectRefused(
      await take(sut, user, 'uploads'),
      'At most 2 uploads may be in progress at once; retry when one has ended.',
    );

    const early = new FakeResponse();
    const other = randomUUID();
    const letGo = await sut.take(other, 'held', early as unknown as ServerResponse);
    letGo();
    letGo();
    early.close();
    expect(await take(sut, other, 'held')).toBeInstanceOf(FakeResponse);
    expectRefused(
      await take(sut, other, 'held'),
      'At most 1 request may wait (Prefer: wait) at once; retry when one has been answered.',
    );
  });

  it('does not keep a share for a client that went away while it was being taken', async () => {
    const { sut } = await startProcess();
    const user = randomUUID();
    const gone = new FakeResponse();
    const taking = sut.take(user, 'held', gone as unknown as ServerResponse);
    gone.close();
    await taking;

    expect(await take(sut, user, 'held')).toBeInstanceOf(FakeResponse);
  });

  it("frees a crashed process's shares once their leases lapse, and keeps a live process's renewed", async () => {
    const [crashed, live] = [await startProcess(), await startProcess()];
    const user = randomUUID();
    const survivor = randomUUID();
    // The live process's lease is the older: it lapses first unless renewed.
    await holdAll(live.sut, survivor, 'held', 1);
    await holdAll(crashed.sut, user, 'streams', 3);
    // The process dies: it neither gives its leases back nor renews them again.
    crashed.sut.onApplicationShutdown();
    expectRefused(
      await take(live.sut, user, 'streams'),
      'At most 3 event streams may be open at once; close one first.',
    );

    let answer = await take(live.sut, user, 'streams');
    while (answer instanceof DomainError) {
      await sleep(LEASE_MS / 3);
      answer = await take(live.sut, user, 'streams');
    }

    // The live process's lease, older than those that lapsed, was renewed and still counts.
    expectRefused(
      await take(live.sut, survivor, 'held'),
      'At most 1 request may wait (Prefer: wait) at once; retry when one has been answered.',
    );
  });

  it('counts the leases Redis lost (a restart without persistence) again at their next renewal', async () => {
    const { sut, redis } = await startProcess();
    const user = randomUUID();
    await holdAll(sut, user, 'held', 1);
    await redis.del(`${FAIR_SHARE}held:${user}`);
    const late = await take(sut, user, 'held');
    expect(late).toBeInstanceOf(FakeResponse);
    (late as FakeResponse).close();

    // The lost lease is added back by the renewal: the user holds their whole share again.
    let answer = await take(sut, user, 'held');
    while (answer instanceof FakeResponse) {
      answer.close();
      await sleep(LEASE_MS / 3);
      answer = await take(sut, user, 'held');
    }
    expectRefused(answer, 'At most 1 request may wait (Prefer: wait) at once; retry when one has been answered.');
  });
});
