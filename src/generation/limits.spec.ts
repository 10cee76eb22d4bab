import fc from 'fast-check';
import { budgetOf, rateLimitHeaders, secondsUntilFree } from './limits.js';

const MINUTE_MS = 60_000;

/**
 * Whether the sliding window has room for one more creation `wait` seconds after a refusal at `elapsedMs` into the
 * minute, with nothing else created meanwhile: this minute's count becomes the previous minute's when the minute
 * turns, and is forgotten a minute later. In creation-milliseconds, so that the boundary is exact.
 */
function hasRoomAfter(limit: number, current: number, previous: number, elapsedMs: number, wait: number): boolean {
  const at = elapsedMs + wait * 1000;
  if (at < MINUTE_MS) return previous * (MINUTE_MS - at) + (current + 1) * MINUTE_MS <= limit * MINUTE_MS;
  if (at < 2 * MINUTE_MS) return current * (2 * MINUTE_MS - at) + MINUTE_MS <= limit * MINUTE_MS;
  return true;
}

/** A refusal the service can give: counts over the budget, at some moment of the minute. */
const refusal = fc
  .record({
    limit: fc.integer({ min: 1, max: 100 }),
    elapsedMs: fc.integer({ min: 0, max: MINUTE_MS - 1 }),
    currentShare: fc.double({ min: 0, max: 1, noNaN: true }),
    previousShare: fc.double({ min: 0, max: 1, noNaN: true }),
  })
  .map(({ limit, elapsedMs, currentShare, previousShare }) => ({
    limit,
    elapsedMs,
    current: Math.round(currentShare * limit),
    previous: Math.round(previousShare * limit),
  }))
  .filter(({ limit, current, previous, elapsedMs }) => !hasRoomAfter(limit, current, previous, elapsedMs, 0));

describe('secondsUntilFree (the Retry-After of a refused creation)', () => {
  it('is the first whole second at which a retry is accepted, and a retry a second earlier is refused', () => {
    fc.assert(
      fc.property(refusal, ({ limit, current, previous, elapsedMs }) => {
        const sut = secondsUntilFree(limit, current, previous, elapsedMs);

        expect(hasRoomAfter(limit, current, previous, elapsedMs, sut)).toBe(true);
        if (sut > 1) expect(hasRoomAfter(limit, current, previous, elapsedMs, sut - 1)).toBe(false);
      }),
      { numRuns: 2000 },
    );
  });

  it('sends a client over a one-a-minute budget to the minute after next when that is when room appears', () => {
    // One creation made at 0:30 with a limit of one: the next is allowed once that creation's minute has fully
    // slid out of the window, at 2:00, i.e. 90 s later.
    expect(secondsUntilFree(1, 1, 0, 30_000)).toBe(90);
  });
});

describe('budgetOf (the RateLimit header fields and the usage of a minute)', () => {
  it('counts the previous minute for the part of it still in the window', () => {
    // 30 s into the minute: half of the previous minute's 40 still counts, with this minute's 10.
    const sut = budgetOf(60, 10, 40, 30_000);

    expect(sut).toEqual({ limit: 60, used: 30, remaining: 30, resetSeconds: 30 });
  });

  it('says when the next creation is allowed once none remains, as the refusal does', () => {
    const sut = budgetOf(1, 1, 0, 30_000);

    expect(sut).toEqual({ limit: 1, used: 1, remaining: 0, resetSeconds: 90 });
  });

  it('writes the policy and the standing in the IETF draft syntax', () => {
    const sut = rateLimitHeaders(budgetOf(60, 1, 0, 18_000));

    expect(sut).toEqual({ 'RateLimit-Policy': '"creations";q=60;w=60', RateLimit: '"creations";r=59;t=42' });
  });
});
