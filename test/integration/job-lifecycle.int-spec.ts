import { randomUUID } from 'node:crypto';
import type { INestApplicationContext } from '@nestjs/common';
import { Database } from '../../src/database/database.js';
import type { JobErrorCode, JobStatus } from '../../src/jobs/history-item.entity.js';
import { type JobEvent, JobEvents } from '../../src/jobs/job-events.js';
import { JobLifecycle } from '../../src/jobs/job-lifecycle.js';
import { INPUT_STORE, inputKey, MEDIA_STORE, outputKey } from '../../src/media/media.js';
import type { ObjectStore } from '../../src/media/object-store.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { bootLifecycle } from '../support/lifecycle.js';

/** Rounds per pair of operations: each round is a new item, both operations started at once. */
const ROUNDS = 12;

type Operation = 'complete' | 'fail' | 'cancel' | 'delete' | 'expire' | 'timeout';
const OPERATIONS: Operation[] = ['complete', 'fail', 'cancel', 'delete', 'expire', 'timeout'];

/** The error code each ending operation records. */
const ERROR_CODES: Partial<Record<Operation, JobErrorCode>> = {
  fail: 'engine_failed',
  cancel: 'canceled',
  timeout: 'timeout',
};

/** Every unordered pair, an operation with itself included (two deliveries of one job, two deletes). */
const PAIRS: [Operation, Operation][] = OPERATIONS.flatMap((first, index) =>
  OPERATIONS.slice(index).map((second): [Operation, Operation] => [first, second]),
);

describe('JobLifecycle on a real PostgreSQL, Redis and storage', () => {
  let env: TestEnvironment;
  let app: INestApplicationContext;
  let sut: JobLifecycle;
  let db: Database;
  let inputs: ObjectStore;
  let media: ObjectStore;
  let userId: string;
  const events: JobEvent[] = [];

  beforeAll(async () => {
    env = await createTestEnvironment();
    app = await bootLifecycle(env.serviceEnv);
    sut = app.get(JobLifecycle);
    db = app.get(Database);
    inputs = app.get(INPUT_STORE);
    media = app.get(MEDIA_STORE);
    app.get(JobEvents).subscribe((event) => {
      events.push(event);
    });
    userId = randomUUID();
    await db.query({ text: 'INSERT INTO users (id, name) VALUES ($1, $2)', values: [userId, 'racer'] });
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await env?.dispose();
  }, 60_000);

  /** A pending item as a creation leaves it: its input stored, its row written, its job queued. */
  async function pendingItem(): Promise<string> {
    const id = randomUUID();
    const key = inputKey(id, 'image');
    await inputs.put(key, Buffer.from(`the photo of ${id}`));
    const input = { key, format: 'jpeg' as const, width: 64, height: 64, bytes: 10 };
    const accepted = await sut.accept(
      {
        id,
        userId,
        tool: 'default',
        generationType: 'default',
        inputs: { image: input },
        texts: {},
        webhookUrl: null,
        seed: null,
        numOutputs: 1,
      },
      1000,
    );
    if (!accepted) throw new Error('the item was refused');
    return id;
  }

  /** What a run of the job writes: bytes that say which run wrote them. */
  function writeOutputs(id: string, run: string): () => Promise<void> {
    return async () => {
      await Promise.all([
        media.put(outputKey(id, 'stock'), Buffer.from(`stock by ${run}`)),
        media.put(outputKey(id, 'preview'), Buffer.from(`preview by ${run}`)),
      ]);
    };
  }

  /** Runs one operation; resolves whether it changed the item (ended it, or removed it). */
  async function perform(operation: Operation, id: string, run: string): Promise<boolean> {
    switch (operation) {
      case 'complete':
        return sut.complete(id, writeOutputs(id, run));
      case 'fail':
        return sut.fail(id, 'engine_failed', 'The engine could not process the job.');
      case 'cancel':
        return (await sut.cancel(userId, id)) === 'canceled';
      case 'delete':
        return sut.delete(userId, id);
      case 'expire':
        // Whatever it removes, it announces: this item's removal is read from the announcements, which listeners
        // receive on a later turn.
        await sut.expire(0, 1000);
        await new Promise(setImmediate);
        return events.some((event) => event.historyItemId === id && event.kind === 'deleted');
      case 'timeout':
        return sut.timeOut(id);
    }
  }

  async function rowOf(id: string): Promise<{ status: JobStatus; errorCode: JobErrorCode | null } | undefined> {
    const [row] = await db.query<{ status: JobStatus; errorCode: JobErrorCode | null }>({
      text: 'SELECT status, error_code AS "errorCode" FROM history_items WHERE id = $1',
      values: [id],
    });
    return row;
  }

  async function filesOf(id: string): Promise<{ media: string[]; inputs: string[] }> {
    const found = { media: [] as string[], inputs: [] as string[] };
    for await (const { key } of media.list()) if (key.startsWith(`${id}/`)) found.media.push(key);
    for await (const { key } of inputs.list()) if (key.startsWith(id)) found.inputs.push(key);
    found.media.sort();
    return found;
  }

  describe.each(PAIRS)('%s racing %s', (first, second) => {
    it.each(['pending', 'complete'] as const)(
      `of a %s item: exactly one outcome, no file without a row`,
      async (start) => {
        for (let round = 0; round < ROUNDS; round++) {
          const id = await pendingItem();
          if (start === 'complete' && !(await sut.complete(id, writeOutputs(id, 'the first run')))) {
            throw new Error('the item did not complete before the race');
          }
          events.length = 0;

          const [firstChanged, secondChanged] = await Promise.all([
            perform(first, id, 'run A'),
            perform(second, id, 'run B'),
          ]);

          const changes = [
            { operation: first, run: 'run A', changed: firstChanged },
            { operation: second, run: 'run B', changed: secondChanged },
          ].filter((change) => change.changed);
          const mine = events.filter((event) => event.historyItemId === id);
          const endings = mine.filter((event) => event.kind === 'completed' || event.kind === 'failed');
          const removals = mine.filter((event) => event.kind === 'deleted');
          const row = await rowOf(id);
          const files = await filesOf(id);
          const context = { round, start, changes, mine, row, files };

          // Nothing ends a pending item but an operation that ends or deletes one.
          if (start === 'pending' && first === 'expire' && second === 'expire') {
            expect(context).toMatchObject({ changes: [], mine: [], row: { status: 'pending' } });
            continue;
          }
          // Exactly one outcome: a pending item ends once, or is deleted while pending; a complete one never ends again.
          // And it is removed once at most.
          expect({ ...context, endings: endings.length, twoRemovals: removals.length > 1 }).toMatchObject({
            endings: start === 'pending' && removals[0]?.status !== 'pending' ? 1 : 0,
            twoRemovals: false,
          });
          const ended = changes.filter((change) => change.operation !== 'delete' && change.operation !== 'expire');
          expect({ ...context, ended: ended.length }).toMatchObject({ ended: endings.length });

          if (removals.length === 1) {
            // Gone, with every file of it.
            expect(context).toMatchObject({ row: undefined, files: { media: [], inputs: [] } });
          } else if (row?.status === 'complete') {
            const run = start === 'complete' ? 'the first run' : ended[0].run;
            expect({ ...context, ended: ended.map((change) => change.operation) }).toMatchObject({
              ended: start === 'complete' ? [] : ['complete'],
              files: { media: [outputKey(id, 'preview'), outputKey(id, 'stock')], inputs: [] },
            });
            // Written by the run that completed it, and never rewritten by the other.
            expect((await media.get(outputKey(id, 'stock'))).toString()).toBe(`stock by ${run}`);
            expect((await media.get(outputKey(id, 'preview'))).toString()).toBe(`preview by ${run}`);
          } else {
            expect(context).toMatchObject({
              row: { status: 'error', errorCode: ERROR_CODES[ended[0]?.operation] },
              files: { media: [], inputs: [] },
            });
          }
        }
      },
    );
  });
});
