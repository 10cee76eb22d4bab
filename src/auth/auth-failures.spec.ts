import type { Redis } from 'ioredis';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { AuthFailureLimit, clientOf } from './auth-failures.js';

/**
 * A Redis that runs rate-limiter-flexible's window script (`rlflxIncr`: open a window of ARGV[2] seconds at the first
 * point, add ARGV[1], answer the count and the window's milliseconds left) on counters of its own, each window
 * having `windowLeftMs` left; or fails with `error`.
 */
function fakeRedis(outcome: { windowLeftMs?: number; error?: Error } = {}) {
  const counts = new Map<string, number>();
  const windows = new Map<string, number>();
  const redis = {
    defineCommand: () => undefined,
    rlflxIncr: ([key, points, seconds]: string[]) => {
      if (outcome.error) return Promise.reject(outcome.error);
      if (!counts.has(key)) windows.set(key, Number(seconds) * 1000);
      counts.set(key, (counts.get(key) ?? 0) + Number(points));
      return Promise.resolve([counts.get(key), outcome.windowLeftMs ?? windows.get(key)]);
    },
  };
  return { redis: redis as unknown as Redis, counts, windows };
}

const config = new AppConfig({ AUTH_FAILURES_PER_MINUTE: '3' });

describe('AuthFailureLimit', () => {
  it('lets a client through while its failures are under the limit', async () => {
    const { redis } = fakeRedis({ windowLeftMs: 30_000 });
    const sut = new AuthFailureLimit(redis, config);

    await sut.recordFailure('203.0.113.7');
    await sut.recordFailure('203.0.113.7');

    expect(() => sut.assertAllowed('203.0.113.7')).not.toThrow();
  });

  it('refuses a client out of failures with 429 rate_limited and the seconds left in its minute', async () => {
    const { redis } = fakeRedis({ windowLeftMs: 41_200 });
    const sut = new AuthFailureLimit(redis, config);
    for (let i = 0; i < 3; i++) await sut.recordFailure('203.0.113.7');

    let refusal: unknown;
    try {
      sut.assertAllowed('203.0.113.7');
    } catch (error) {
      refusal = error;
    }

    expect(refusal).toBeInstanceOf(DomainError);
    expect((refusal as DomainError).code).toBe('rate_limited');
    expect((refusal as DomainError).status).toBe(429);
    expect((refusal as DomainError).options.headers).toEqual({ 'Retry-After': '42' });
    expect(() => sut.assertAllowed('203.0.113.8')).not.toThrow();
  });

  it('refuses a client that other replicas counted over the limit', async () => {
    const { redis, counts } = fakeRedis({ windowLeftMs: 20_000 });
    counts.set('auth:failures:203.0.113.7', 5);
    const sut = new AuthFailureLimit(redis, config);

    await sut.recordFailure('203.0.113.7');

    expect(() => sut.assertAllowed('203.0.113.7')).toThrow(DomainError);
  });

  it("counts a client's failures under its own key, in a minute-long window opened by the first one", async () => {
    const { redis, counts, windows } = fakeRedis();
    const sut = new AuthFailureLimit(redis, config);

    await sut.recordFailure('::ffff:203.0.113.7');
    await sut.recordFailure('203.0.113.7');

    expect(Object.fromEntries(counts)).toEqual({ 'auth:failures:203.0.113.7': 2 });
    expect(Object.fromEntries(windows)).toEqual({ 'auth:failures:203.0.113.7': 60_000 });
  });

  it('lets requests through and counts nothing while Redis is down', async () => {
    const { redis } = fakeRedis({ error: new Error("Stream isn't writeable and enableOfflineQueue options is false") });
    const sut = new AuthFailureLimit(redis, config);

    for (let i = 0; i < 5; i++) await expect(sut.recordFailure('203.0.113.7')).resolves.toBeUndefined();
    expect(() => sut.assertAllowed('203.0.113.7')).not.toThrow();
  });
});

describe('clientOf', () => {
  it.each([
    ['an IPv4 address as it is', '203.0.113.7', '203.0.113.7'],
    ['an IPv4-mapped IPv6 address as its IPv4 address', '::ffff:203.0.113.7', '203.0.113.7'],
    ['an IPv6 address as its /64', '2001:db8:1:2:aaaa:bbbb:cccc:dddd', '2001:db8:1:2::/64'],
    ['a compressed IPv6 address as its /64', '2001:db8::1', '2001:db8:0:0::/64'],
    ['an IPv6 address compressed inside its /64', '2001:db8::5:0:0:1', '2001:db8:0:0::/64'],
    ['the IPv6 loopback', '::1', '0:0:0:0::/64'],
    ['upper case and leading zeros alike', '2001:0DB8:0001:0002::1', '2001:db8:1:2::/64'],
    ['a link-local address without its zone', 'fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['anything else as it is', 'unknown', 'unknown'],
  ])('counts %s', (_case, ip, expected) => {
    expect(clientOf(ip)).toBe(expected);
  });

  it('puts every address of one /64 together and other /64s apart', () => {
    expect(clientOf('2001:db8:1:2::a')).toBe(clientOf('2001:db8:1:2:ffff::b'));
    expect(clientOf('2001:db8:1:2::a')).not.toBe(clientOf('2001:db8:1:3::a'));
  });
});
