import type { AppConfig } from '../config/config.js';
import type { EngineRegistry, EngineRequest } from '../engines/index.js';
import type { EngineRuns } from '../jobs/engine-runs.js';
import { memoryRuns } from '../../test/support/run-record.js';
import type { HistoryRepository, JobRow } from '../jobs/history.repository.js';
import type { JobEvents, WatchedEvent } from '../jobs/job-events.js';
import type { JobLifecycle } from '../jobs/job-lifecycle.js';
import type { JobProgress } from '../jobs/job-progress.js';
import type { ObjectStore } from '../media/object-store.js';
import type { Metrics } from '../metrics/metrics.js';
import type { Delivery, JobQueue } from '../queue/job-queue.js';
import type { EngineSlots } from './engine-slots.js';
import { GenerationProcessor } from './generation.processor.js';
import { RunningJobs } from './running-jobs.js';

const ID = 'item-1';

const PENDING: JobRow = {
  id: ID,
  userId: 'user-1',
  tool: 'fashion_swap',
  generationType: 'fashion_swap_full',
  status: 'pending',
  inputs: { person: { key: `${ID}-person`, format: 'jpeg', width: 640, height: 960, bytes: 1000 } },
  texts: {},
  seed: null,
  numOutputs: 1,
};

const DELIVERY: Delivery = {
  historyItemId: ID,
  attemptsMade: 0,
  isLastAttempt: false,
  queuedAt: Date.now(),
  discard: () => Promise.resolve(),
};

/**
 * A worker whose item is canceled (by an API request in another process) the moment the worker has read it pending:
 * the cancel's event is fanned out right after the read. Records what the engine was told and what the worker wrote.
 */
function workerWithCancelAfterRead() {
  const listeners = new Set<(event: WatchedEvent) => void>();
  const events = {
    watch: (_scope: unknown, listener: (event: WatchedEvent) => void) => {
      listeners.add(listener);
      return Promise.resolve(() => listeners.delete(listener));
    },
  };
  const items = {
    findJob: () => {
      queueMicrotask(() => {
        for (const listener of listeners) listener({ kind: 'failed', historyItemId: ID } as WatchedEvent);
      });
      return Promise.resolve(PENDING);
    },
  };
  const seen = { engineStopped: undefined as boolean | undefined, written: [] as string[] };
  const engine = {
    generate: async (request: EngineRequest) => {
      // The first await a real engine makes (reading an input, a request to its model server).
      await Promise.resolve();
      const { signal } = request;
      seen.engineStopped = signal?.aborted === true;
      if (signal?.aborted) throw signal.reason;
      return { data: Buffer.alloc(0) };
    },
  };
  const lifecycle = {
    complete: () => {
      seen.written.push('complete');
      return Promise.resolve(true);
    },
    fail: (_id: string, code: string) => {
      seen.written.push(`fail ${code}`);
      return Promise.resolve();
    },
    removeLeftovers: () => Promise.resolve(),
    start: () => Promise.resolve(),
  };
  const config = { imageMaxPixels: 1_000_000, shutdownTimeoutMs: 1000, jobStateCheckMs: 60_000 } as AppConfig;
  const processor = new GenerationProcessor(
    {} as JobQueue,
    items as unknown as HistoryRepository,
    lifecycle as unknown as JobLifecycle,
    new RunningJobs(events as unknown as JobEvents, items as unknown as HistoryRepository, config),
    { get: () => Promise.resolve(Buffer.alloc(1)) } as unknown as ObjectStore,
    {} as ObjectStore,
    {
      route: () => ({
        kind: 'local',
        engineName: 'local',
        engine,
        variants: { seed: true, several: 'none', maxOutputs: 1 },
      }),
    } as unknown as EngineRegistry,
    {
      turn: () => ({
        slot: undefined,
        deadline: new AbortController().signal,
        end: () => Promise.resolve(),
        handOver: () => {},
      }),
    } as unknown as EngineSlots,
    {
      for: () => ({ run: () => memoryRuns(), forget: () => Promise.resolve() }),
      abandon: () => Promise.resolve(),
    } as unknown as EngineRuns,
    { start: () => ({ report: () => {}, end: () => {} }) } as unknown as JobProgress,
    config,
    {
      observeQueueWait: () => {},
      startAttempt: () => () => {},
      timeEngine: (_tool: string, _kind: string, work: () => Promise<unknown>) => work(),
    } as unknown as Metrics,
  );
  return { processor, seen, listeners };
}

describe('GenerationProcessor', () => {
  it('stops the engine for an item canceled right after the worker read it pending, and records nothing', async () => {
    const { processor, seen, listeners } = workerWithCancelAfterRead();

    await processor.run(DELIVERY);

    expect(seen.engineStopped).toBe(true);
    expect(seen.written).toEqual([]);
    expect(listeners.size).toBe(0);
  });
});
