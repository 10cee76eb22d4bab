import type { Redis } from 'ioredis';
import type { EngineRegistry } from '../engines/index.js';
import { ServiceUnavailableError } from '../common/unavailable.js';
import type { AppConfig } from '../config/config.js';
import type { ObjectStore } from '../media/object-store.js';
import type { Metrics } from '../metrics/metrics.js';
import type { JobQueue } from '../queue/job-queue.js';
import type { WebhookQueue } from '../queue/webhook-queue.js';
import type { JobStatus, StoredInput } from './history-item.entity.js';
import type { EngineRuns } from './engine-runs.js';
import type { EndedRow, HistoryRepository, NewHistoryItem } from './history.repository.js';
import { type JobEvent, JobEvents } from './job-events.js';
import { JobLifecycle } from './job-lifecycle.js';
import type { JobProgress } from './job-progress.js';
import type { OutputLease } from './output-lease.js';
import type { QueueLine } from './queue-line.js';

/** Everything the fakes below are asked to do, in order: the lifecycle's promises are about that order. */
type Step = string;

const USER = 'user-1';
const ID = 'item-1';
const INPUTS: Record<string, StoredInput> = {
  person: { key: `${ID}-person`, format: 'jpeg', width: 640, height: 960, bytes: 1000 },
  clothes: { key: `${ID}-clothes`, format: 'png', width: 512, height: 512, bytes: 1000 },
};

function newItem(): NewHistoryItem {
  return {
    id: ID,
    userId: USER,
    tool: 'fashion_swap',
    generationType: 'fashion_swap_full',
    inputs: INPUTS,
    texts: {},
    webhookUrl: null,
    webhookEvents: null,
    seed: null,
    numOutputs: 1,
  };
}

/** A history table of one row at most, and the storage and queue around it, all recording into `steps`. */
function world(
  options: {
    queueDown?: boolean;
    pendingLimitReached?: boolean;
    insertFails?: boolean;
    workerHoldsJob?: boolean;
    /** The model server does not answer the stop: `abandon` resolves only once `answer` is called. */
    serverSilent?: boolean;
    /** Storage refuses every removal. */
    storageRefusesRemovals?: boolean;
    /** A worker began running the job before. */
    started?: boolean;
  } = {},
) {
  const steps: Step[] = [];
  /** What the queue line was told, apart from `steps`: the line is QueueLine's own test (test/integration). */
  const line: string[] = [];
  let row: (EndedRow & { status: JobStatus }) | undefined;
  const items = {
    createWithinPendingLimit: (item: NewHistoryItem) => {
      if (options.pendingLimitReached) return Promise.resolve(false);
      if (options.insertFails) return Promise.reject(new Error('insert or update on table "history_items" violates'));
      steps.push('insert row');
      row = {
        id: item.id,
        userId: item.userId,
        tool: item.tool,
        generationType: item.generationType,
        status: 'pending',
        inputs: item.inputs,
      };
      return Promise.resolve(true);
    },
    statusOf: (id: string) => Promise.resolve(row?.id === id ? row.status : undefined),
    completeWhilePending: (id: string) => {
      if (row?.id !== id || row.status !== 'pending') return Promise.resolve(undefined);
      row.status = 'complete';
      steps.push('commit complete');
      return Promise.resolve({ ...row });
    },
    failWhilePending: (id: string) => {
      if (row?.id !== id || row.status !== 'pending') return Promise.resolve(undefined);
      row.status = 'error';
      steps.push('commit error');
      return Promise.resolve({ ...row });
    },
    failOwnedWhilePending: (userId: string, id: string) => {
      if (row?.id !== id || row.userId !== userId) return Promise.resolve(undefined);
      if (row.status !== 'pending') return Promise.resolve(row.status);
      row.status = 'error';
      steps.push('commit error');
      return Promise.resolve({ ...row });
    },
    notStarted: (id: string) =>
      Promise.resolve(row?.id === id && row.status === 'pending' && !options.started ? { ...row } : undefined),
    deleteOwned: (userId: string, id: string) => {
      if (row?.id !== id || row.userId !== userId) return Promise.resolve(undefined);
      const deleted = row;
      row = undefined;
      steps.push('delete row');
      return Promise.resolve(deleted);
    },
  };
  const queue = {
    enqueue: () => {
      if (options.queueDown) return Promise.reject(new ServiceUnavailableError('queue'));
      steps.push('enqueue');
      return Promise.resolve();
    },
    drop: () => {
      steps.push(options.workerHoldsJob ? 'drop job: a worker holds it' : 'drop job');
      return Promise.resolve(!options.workerHoldsJob);
    },
    requeue: () => {
      steps.push('enqueue again');
      return Promise.resolve();
    },
  };
  const removal = () =>
    options.storageRefusesRemovals ? Promise.reject(new Error('EIO: i/o error, rmdir')) : Promise.resolve();
  const store = (name: string) => ({
    delete: (keys: readonly string[]) => {
      steps.push(`${name}: delete ${[...keys].sort().join(', ')}`);
      return removal();
    },
    deleteFolder: (prefix: string) => {
      steps.push(`${name}: delete folder ${prefix}`);
      return removal();
    },
  });
  const lease = {
    whileHeld: async <T>(_id: string, work: () => Promise<T>) => {
      steps.push('take lease');
      try {
        return await work();
      } finally {
        steps.push('release lease');
      }
    },
  };
  const outcomes: string[] = [];
  const metrics = { countJobOutcome: (_tool: string, outcome: string) => outcomes.push(outcome) };
  const redis = { publish: () => Promise.resolve(0) };
  const events = new JobEvents(redis as unknown as Redis, { redisPrefix: 'test' } as AppConfig);
  const announced: JobEvent[] = [];
  events.subscribe((event) => {
    announced.push(event);
  });
  const webhooks = {
    drop: () => {
      steps.push('drop webhook message');
      return Promise.resolve(true);
    },
  };
  const progress = {
    forget: () => {
      steps.push('forget progress');
      return Promise.resolve();
    },
  };
  let answer = () => {};
  const runs = {
    abandon: (job: { id: string; tool: string; generationType: string }) => {
      steps.push(`abandon the run of ${job.id} (${job.tool}/${job.generationType})`);
      return options.serverSilent ? new Promise<void>((resolve) => (answer = resolve)) : Promise.resolve();
    },
  };
  const sut = new JobLifecycle(
    items as unknown as HistoryRepository,
    queue as unknown as JobQueue,
    webhooks as unknown as WebhookQueue,
    events,
    progress as unknown as JobProgress,
    runs as unknown as EngineRuns,
    metrics as unknown as Metrics,
    lease as unknown as OutputLease,
    {
      join: (id: string, engine: string, userId: string) =>
        Promise.resolve(line.push(`join ${id} ${engine} ${userId}`)),
      leave: (id: string) => Promise.resolve(line.push(`leave ${id}`)),
    } as unknown as QueueLine,
    { route: () => ({ engineName: 'local' }) } as unknown as EngineRegistry,
    store('inputs') as unknown as ObjectStore,
    store('media') as unknown as ObjectStore,
  );
  return { sut, steps, line, outcomes, announced, status: () => row?.status, answer: () => answer() };
}

/** Listeners run after the change, on a later turn. */
const settled = () => new Promise((resolve) => setImmediate(resolve));

const DELETE_INPUTS = `inputs: delete ${ID}-clothes, ${ID}-person`;
const ABANDON_RUN = `abandon the run of ${ID} (fashion_swap/fashion_swap_full)`;

describe('JobLifecycle and the queue line', () => {
  it("puts an accepted job in its engine's line, for its user", async () => {
    const { sut, line } = world();

    await sut.accept(newItem(), 10);

    expect(line).toEqual([`join ${ID} local ${USER}`]);
  });

  it('takes a job the queue refused out of the line again', async () => {
    const { sut, line } = world({ queueDown: true });

    await expect(sut.accept(newItem(), 10)).rejects.toBeInstanceOf(ServiceUnavailableError);

    expect(line).toEqual([`join ${ID} local ${USER}`, `leave ${ID}`]);
  });

  it('takes a canceled job out of the line', async () => {
    const { sut, line } = world();
    await sut.accept(newItem(), 10);

    await sut.cancel(USER, ID);

    expect(line.at(-1)).toBe(`leave ${ID}`);
  });

  it.each([
    [false, [`join ${ID} local ${USER}`]],
    [true, []],
  ])('requeues a job with its place in line unless it started (started: %s)', async (started, joins) => {
    const { sut, steps, line } = world({ started });
    await sut.accept(newItem(), 10);
    line.length = 0;

    await sut.requeue(ID);

    expect(line).toEqual(joins);
    expect(steps.at(-1)).toBe('enqueue again');
  });
});

describe('JobLifecycle', () => {
  describe('accept', () => {
    it('writes the row before queueing, and announces the new pending item', async () => {
      const { sut, steps, announced } = world();

      expect(await sut.accept(newItem(), 10)).toBe(true);
      await settled();

      expect(steps).toEqual(['insert row', 'enqueue']);
      expect(announced).toEqual([{ kind: 'created', historyItemId: ID, userId: USER, status: 'pending' }]);
    });

    it('with the queue down: removes the row, then the inputs, and passes the outage on', async () => {
      const { sut, steps, announced } = world({ queueDown: true });

      await expect(sut.accept(newItem(), 10)).rejects.toBeInstanceOf(ServiceUnavailableError);
      await settled();

      // The row goes first: a row whose inputs were gone would be queued again by the reconciler and fail.
      expect(steps).toEqual(['insert row', 'delete row', DELETE_INPUTS]);
      expect(announced).toEqual([]);
    });

    it('at the pending limit: stores nothing, queues nothing, removes the inputs', async () => {
      const { sut, steps, announced } = world({ pendingLimitReached: true });

      expect(await sut.accept(newItem(), 10)).toBe(false);
      await settled();

      expect(steps).toEqual([DELETE_INPUTS]);
      expect(announced).toEqual([]);
    });

    it('when the row cannot be written (its user was removed meanwhile): removes the inputs and passes the error on', async () => {
      const { sut, steps, announced } = world({ insertFails: true });

      await expect(sut.accept(newItem(), 10)).rejects.toThrow('history_items');
      await settled();

      expect(steps).toEqual([DELETE_INPUTS]);
      expect(announced).toEqual([]);
    });
  });

  describe('complete', () => {
    it('writes the outputs under the lease into an emptied folder, commits, then removes the inputs', async () => {
      const { sut, steps, outcomes, announced, status } = world();
      await sut.accept(newItem(), 10);
      steps.length = 0;

      const completed = await sut.complete(ID, () => {
        steps.push('write outputs');
        return Promise.resolve();
      });
      await settled();

      expect(completed).toBe(true);
      expect(status()).toBe('complete');
      expect(steps).toEqual([
        'take lease',
        `media: delete folder ${ID}`,
        'write outputs',
        'commit complete',
        'release lease',
        DELETE_INPUTS,
      ]);
      expect(outcomes).toEqual(['complete']);
      expect(announced.at(-1)).toEqual({ kind: 'completed', historyItemId: ID, userId: USER, status: 'complete' });
    });

    it('drops the result of an item that is no longer pending: nothing written, nothing counted', async () => {
      const { sut, steps, outcomes, announced } = world();
      await sut.accept(newItem(), 10);
      await sut.fail(ID, 'timeout', 'The job did not finish in time.');
      steps.length = 0;
      announced.length = 0;

      const completed = await sut.complete(ID, () => {
        steps.push('write outputs');
        return Promise.resolve();
      });
      await settled();

      expect(completed).toBe(false);
      expect(steps).toEqual(['take lease', 'release lease']);
      expect(outcomes).toEqual(['timeout']);
      expect(announced).toEqual([]);
    });

    it('removes what it wrote when a delete took the item while it wrote', async () => {
      const { sut, steps, outcomes, status } = world();
      await sut.accept(newItem(), 10);
      steps.length = 0;

      const completed = await sut.complete(ID, async () => {
        steps.push('write outputs');
        await sut.delete(USER, ID);
      });

      expect(completed).toBe(false);
      expect(status()).toBeUndefined();
      expect(steps.slice(-2)).toEqual([`media: delete folder ${ID}`, 'release lease']);
      expect(outcomes).toEqual([]);
    });
  });

  describe('fail', () => {
    it('ends a pending item once, with its inputs and any partial outputs removed', async () => {
      const { sut, steps, outcomes, announced, status } = world();
      await sut.accept(newItem(), 10);
      steps.length = 0;

      expect(await sut.fail(ID, 'engine_failed', 'The engine could not process the job.')).toBe(true);
      expect(await sut.fail(ID, 'timeout', 'The job did not finish in time.')).toBe(false);
      await settled();

      expect(status()).toBe('error');
      expect(steps).toEqual(['commit error', DELETE_INPUTS, `media: delete folder ${ID}`]);
      expect(outcomes).toEqual(['engine_failed']);
      expect(announced.at(-1)).toEqual({ kind: 'failed', historyItemId: ID, userId: USER, status: 'error' });
    });
  });

  describe('cancel', () => {
    it('ends a queued job, drops it, and stops the model run an earlier attempt left going', async () => {
      const { sut, steps, outcomes, status } = world();
      await sut.accept(newItem(), 10);
      steps.length = 0;

      expect(await sut.cancel(USER, ID)).toBe('canceled');

      expect(status()).toBe('error');
      expect(steps).toEqual(['commit error', 'drop job', DELETE_INPUTS, `media: delete folder ${ID}`, ABANDON_RUN]);
      expect(outcomes).toEqual(['canceled']);
    });

    it('leaves a job a worker holds, and its run, to that worker, which stops them itself', async () => {
      const { sut, steps } = world({ workerHoldsJob: true });
      await sut.accept(newItem(), 10);
      steps.length = 0;

      expect(await sut.cancel(USER, ID)).toBe('canceled');

      expect(steps).toEqual([
        'commit error',
        'drop job: a worker holds it',
        DELETE_INPUTS,
        `media: delete folder ${ID}`,
      ]);
    });

    it('answers the status of an item already final, and changes nothing', async () => {
      const { sut, steps } = world();
      await sut.accept(newItem(), 10);
      await sut.complete(ID, () => Promise.resolve());
      steps.length = 0;

      expect(await sut.cancel(USER, ID)).toBe('complete');

      expect(steps).toEqual([]);
    });
  });

  describe('with a model server that does not answer the stop of a run left going', () => {
    it.each([
      ['a cancel announces the end', (sut: JobLifecycle) => sut.cancel(USER, ID), 'failed', 'error', 'canceled'],
      ['a delete announces the deletion', (sut: JobLifecycle) => sut.delete(USER, ID), 'deleted', 'pending', true],
    ] as const)('%s meanwhile', async (_what, end, kind, status, answered) => {
      const { sut, announced, answer } = world({ serverSilent: true });
      await sut.accept(newItem(), 10);
      announced.length = 0;

      const ending = end(sut);
      await settled();
      await settled();

      expect(announced).toEqual([{ kind, historyItemId: ID, userId: USER, status }]);
      answer();
      expect(await ending).toBe(answered);
    });
  });

  describe('timeOut', () => {
    it('ends an overdue job timeout, drops it, and stops the model run an earlier attempt left going', async () => {
      const { sut, steps, outcomes, status } = world();
      await sut.accept(newItem(), 10);
      steps.length = 0;

      expect(await sut.timeOut(ID)).toBe(true);

      expect(status()).toBe('error');
      expect(steps).toEqual(['commit error', 'drop job', DELETE_INPUTS, `media: delete folder ${ID}`, ABANDON_RUN]);
      expect(outcomes).toEqual(['timeout']);
    });

    it('leaves an item that ended meanwhile as it is, and its run to whoever ended it', async () => {
      const { sut, steps, outcomes } = world();
      await sut.accept(newItem(), 10);
      await sut.complete(ID, () => Promise.resolve());
      steps.length = 0;

      expect(await sut.timeOut(ID)).toBe(false);

      expect(steps).toEqual(['drop job']);
      expect(outcomes).toEqual(['complete']);
    });
  });

  describe('removeLeftovers', () => {
    it('of an item ended while a worker held its job: stops the run an earlier attempt left, removes the inputs', async () => {
      const { sut, steps } = world({ workerHoldsJob: true });
      await sut.accept(newItem(), 10);
      await sut.cancel(USER, ID);
      steps.length = 0;

      await sut.removeLeftovers(ID, { ...newItem(), status: 'error' });

      expect(steps).toEqual([ABANDON_RUN, DELETE_INPUTS, `media: delete folder ${ID}`]);
    });

    it('of a complete item: keeps its outputs, and has no run to stop', async () => {
      const { sut, steps } = world();

      await sut.removeLeftovers(ID, { ...newItem(), status: 'complete' });

      expect(steps).toEqual([DELETE_INPUTS]);
    });
  });

  describe('delete', () => {
    it.each([
      [
        'a pending item, drops its job, and stops the model run an earlier attempt left going',
        'pending',
        [ABANDON_RUN],
      ],
      ['a complete item with its outputs, and drops its job', 'complete', []],
    ] as const)('removes %s', async (_what, status, abandoned) => {
      const { sut, steps, announced } = world();
      await sut.accept(newItem(), 10);
      if (status === 'complete') await sut.complete(ID, () => Promise.resolve());
      steps.length = 0;

      expect(await sut.delete(USER, ID)).toBe(true);
      await settled();

      expect(steps).toEqual([
        'delete row',
        'drop job',
        'drop webhook message',
        'forget progress',
        DELETE_INPUTS,
        `media: delete folder ${ID}`,
        ...abandoned,
      ]);
      expect(announced.at(-1)).toEqual({ kind: 'deleted', historyItemId: ID, userId: USER, status });
    });

    it('stops the run an earlier attempt left also when a worker holds the job, which may find no row to stop it by', async () => {
      const { sut, steps } = world({ workerHoldsJob: true });
      await sut.accept(newItem(), 10);
      steps.length = 0;

      expect(await sut.delete(USER, ID)).toBe(true);

      expect(steps).toEqual([
        'delete row',
        'drop job: a worker holds it',
        'drop webhook message',
        'forget progress',
        DELETE_INPUTS,
        `media: delete folder ${ID}`,
        ABANDON_RUN,
      ]);
    });

    it('succeeds, and announces the deletion, when storage refuses to remove the files', async () => {
      const { sut, announced, status } = world({ storageRefusesRemovals: true });
      await sut.accept(newItem(), 10);

      expect(await sut.delete(USER, ID)).toBe(true);
      await settled();

      expect(status()).toBeUndefined();
      expect(announced.at(-1)).toEqual({ kind: 'deleted', historyItemId: ID, userId: USER, status: 'pending' });
    });

    it("answers false for another user's item and leaves it alone", async () => {
      const { sut, steps, status } = world();
      await sut.accept(newItem(), 10);
      steps.length = 0;

      expect(await sut.delete('someone-else', ID)).toBe(false);

      expect(steps).toEqual([]);
      expect(status()).toBe('pending');
    });
  });
});
