import { once } from 'node:events';
import type { AppConfig } from '../config/config.js';
import type { HistoryRepository } from '../jobs/history.repository.js';
import type { JobEvents, WatchedEvent } from '../jobs/job-events.js';
import { RunningJobs } from './running-jobs.js';

/**
 * A worker's RunningJobs on a fan-out that delivers only what the test sends (a lost message is one never sent) and
 * on items whose state the test sets, as the database holds it.
 */
function runningJobs({ checkMs = 3_600_000 } = {}) {
  const listeners = new Map<string, Set<(event: WatchedEvent) => void>>();
  const events = {
    watch: (scope: { historyItemId: string }, listener: (event: WatchedEvent) => void) => {
      const forItem = listeners.get(scope.historyItemId) ?? new Set();
      listeners.set(scope.historyItemId, forItem);
      forItem.add(listener);
      return Promise.resolve(() => forItem.delete(listener));
    },
  };
  const pending = new Set<string>();
  const reads: string[][] = [];
  /** Replaces the state read once, e.g. with a read that waits or fails. */
  let nextRead: ((ids: string[]) => Promise<string[]>) | undefined;
  const items = {
    pendingAmong: (ids: readonly string[]) => {
      reads.push([...ids]);
      const read = nextRead;
      nextRead = undefined;
      return read ? read([...ids]) : Promise.resolve(ids.filter((id) => pending.has(id)));
    },
  };
  const sut = new RunningJobs(
    events as unknown as JobEvents,
    items as unknown as HistoryRepository,
    { jobStateCheckMs: checkMs } as AppConfig,
  );
  return {
    sut,
    pending,
    reads,
    readOnce(read: (ids: string[]) => Promise<string[]>) {
      nextRead = read;
    },
    /** What the fan-out delivers to one item's watchers, or to all (`resync`). */
    deliver(event: WatchedEvent) {
      const targets = 'historyItemId' in event ? [listeners.get(event.historyItemId)] : [...listeners.values()];
      for (const forItem of targets) for (const listener of [...(forItem ?? [])]) listener(event);
    },
  };
}

/** Resolves once the job is ended, at once if it already is. */
const endOf = (ended: AbortSignal): Promise<unknown> => (ended.aborted ? Promise.resolve() : once(ended, 'abort'));

const FAILED = (id: string) => ({ kind: 'failed', historyItemId: id, userId: 'user-1', status: 'error' }) as const;

describe('RunningJobs', () => {
  it("ends a job when its item's end is announced", async () => {
    const { sut, pending, deliver } = runningJobs();
    pending.add('a');
    const followed = await sut.follow('a');

    deliver(FAILED('a'));

    expect(followed.ended.aborted).toBe(true);
    followed.stop();
  });

  it('ends a job whose item ended while its message was lost, at the next periodic check', async () => {
    const { sut, pending } = runningJobs({ checkMs: 100 });
    pending.add('a');
    const followed = await sut.follow('a');

    // Canceled in the database; the event never reaches this worker.
    pending.delete('a');

    await endOf(followed.ended);
    followed.stop();
  });

  it('checks at once when the fan-out reconnects, when changes may have been missed', async () => {
    const { sut, pending, deliver } = runningJobs();
    pending.add('a');
    const followed = await sut.follow('a');
    pending.delete('a');

    deliver({ kind: 'resync' });

    await endOf(followed.ended);
    followed.stop();
  });

  it("reads all of the worker's running jobs in one statement and ends only those no longer pending", async () => {
    const { sut, pending, reads } = runningJobs();
    for (const id of ['a', 'b', 'c']) pending.add(id);
    const [a, b, c] = await Promise.all(['a', 'b', 'c'].map((id) => sut.follow(id)));
    pending.delete('b');

    await sut.check();

    expect(reads).toEqual([['a', 'b', 'c']]);
    expect([a.ended.aborted, b.ended.aborted, c.ended.aborted]).toEqual([false, true, false]);
    for (const followed of [a, b, c]) followed.stop();
  });

  it('leaves jobs running when their state cannot be read, and ends them at the next check that can', async () => {
    const { sut, readOnce } = runningJobs();
    const followed = await sut.follow('a');
    readOnce(() => Promise.reject(new Error('connection refused')));

    await sut.check();
    expect(followed.ended.aborted).toBe(false);
    await sut.check();

    expect(followed.ended.aborted).toBe(true);
    followed.stop();
  });

  it('checks again after a check that was under way when the fan-out reconnected', async () => {
    const { sut, pending, reads, readOnce, deliver } = runningJobs();
    pending.add('a');
    const followed = await sut.follow('a');
    let answerFirstRead!: (ids: string[]) => void;
    readOnce(() => new Promise((resolve) => (answerFirstRead = resolve)));
    const first = sut.check();

    // The first read saw the item pending; it ended and its message was lost before the fan-out came back.
    pending.delete('a');
    deliver({ kind: 'resync' });
    answerFirstRead(['a']);
    await first;

    await endOf(followed.ended);
    expect(reads).toEqual([['a'], ['a']]);
    followed.stop();
  });

  it('no longer reads the state of a job once it is no longer followed', async () => {
    const { sut, pending, reads } = runningJobs();
    pending.add('a');
    const followed = await sut.follow('a');

    followed.stop();
    await sut.check();

    expect(reads).toEqual([]);
  });
});
