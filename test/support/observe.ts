import { type EventEmitter, once } from 'node:events';
import type Bull from 'bull';
import type { TestEnvironment } from './environment.js';
import { query } from './harness.js';

/**
 * Prints what a fault test saw (counts, timings) as one block, straight to stdout: Jest's console adds a stack
 * location to every line, which buries the figures.
 */
export function report(title: string, figures: Record<string, unknown>): void {
  const lines = Object.entries(figures).map(([name, value]) => `    ${name}: ${format(value)}`);
  process.stdout.write(`\n  [faults] ${title}\n${lines.join('\n')}\n`);
}

function format(value: unknown): string {
  if (typeof value === 'number') return Number.isInteger(value) ? String(value) : value.toFixed(1);
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** History items by status, straight from the database: what no client request could hide. */
export async function statusCounts(env: TestEnvironment): Promise<Record<string, number>> {
  const rows = await query<{ status: string; count: number }>(
    env,
    'SELECT status, count(*)::int AS count FROM history_items GROUP BY status ORDER BY status',
  );
  return Object.fromEntries(rows.map((row) => [row.status, row.count]));
}

export function millisSince(started: number): number {
  return Math.round(performance.now() - started);
}

/** Nearest-rank percentile of the values (which need not be sorted). */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length))) - 1];
}

/** One answer as a client saw it during a fault. */
export interface Answer {
  what: string;
  /** When it was sent, in ms since the test's start. */
  sentAt: number;
  ms: number;
  /** 0 when no HTTP answer came (connection refused or reset). */
  status: number;
  contentType: string | null;
  retryAfter: string | null;
  body: string;
}

/** Sends the request and records how and how fast it was answered; a network error is recorded, not thrown. */
export async function timed(what: string, since: number, send: () => Promise<Response>): Promise<Answer> {
  const sentAt = millisSince(since);
  const started = performance.now();
  try {
    const response = await send();
    const body = await response.text();
    return {
      what,
      sentAt,
      ms: millisSince(started),
      status: response.status,
      contentType: response.headers.get('content-type'),
      retryAfter: response.headers.get('retry-after'),
      body,
    };
  } catch (error) {
    // fetch names the network error (ECONNREFUSED, ECONNRESET) in its cause.
    const cause = error instanceof Error ? (error.cause as Error | undefined)?.message : undefined;
    const reason = `${error instanceof Error ? error.message : String(error)}${cause ? `: ${cause}` : ''}`;
    return { what, sentAt, ms: millisSince(started), status: 0, contentType: null, retryAfter: null, body: reason };
  }
}

/** `{"what status": count}`, for the report. */
export function tally(answers: Answer[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const { what, status } of answers) counts[`${what} ${status}`] = (counts[`${what} ${status}`] ?? 0) + 1;
  return counts;
}

/**
 * API.md: a database or queue that is down is 503 problem+json with `Retry-After`, code `service_unavailable`, and
 * nothing from inside the machine (driver messages, stack frames).
 */
export function expectUnavailableProblem(answer: Answer): void {
  expect({ what: answer.what, status: answer.status }).toEqual({ what: answer.what, status: 503 });
  expect(answer.contentType).toMatch(/^application\/problem\+json/);
  expect(answer.retryAfter).toMatch(/^[1-9]\d*$/);
  expect(JSON.parse(answer.body)).toEqual({
    type: expect.any(String),
    title: expect.any(String),
    status: 503,
    detail: expect.any(String),
    code: 'service_unavailable',
  });
  expect(answer.body).not.toMatch(/\bat |ECONN|ioredis|Stream isn't writeable|Connection terminated|57P0|postgres/i);
}

/**
 * Records the id of every job any worker finds stalled (its lock lapsed while it was active: a worker lost it);
 * resolves once Bull listens, which it sets up in the background.
 */
export async function recordStalls(queue: Bull.Queue): Promise<string[]> {
  const stalled: string[] = [];
  const listening = once(queue as unknown as EventEmitter, 'registered:global:stalled');
  queue.on('global:stalled', (jobId: string) => stalled.push(jobId));
  await listening;
  return stalled;
}
