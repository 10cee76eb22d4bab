import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sha256 } from '../../support/fake-cog.js';
import { Client, type HistoryItemBody } from '../../support/client.js';
import { expectMatchesSchema } from '../../support/contract.js';
import { openStream } from '../../support/event-stream.js';
import { createUser, uniqueImage, waitUntil, WorkerWorld } from '../../support/harness.js';
import type { RunningService } from '../../support/service.js';

/**
 * Two engines on one model server, one slot each: `fashion_card` jobs stand in line `a`, `default` jobs in line `b`,
 * and both share the one Bull queue.
 */
function twoEngines(url: string): Record<string, string> {
  const file = join(mkdtempSync(join(tmpdir(), 'two-engines-')), 'engines.yaml');
  const routing = {
    engines: { a: { kind: 'cog', url, concurrency: 1 }, b: { kind: 'cog', url, concurrency: 1 } },
    routes: {
      fashion_card: { engine: 'a', inputs: { clothes: 'clothes' } },
      default: { engine: 'b', inputs: { image: 'image' } },
    },
  };
  writeFileSync(file, JSON.stringify(routing));
  return { ENGINES_FILE: file, LIMIT_MAX_PENDING: '100', LIMIT_CREATIONS_PER_MINUTE: '1000' };
}

/**
 * Where a queued job is: `queue_position` in its engine's line, with two engines and two workers that take every job
 * from the queue at once, so that all but one job of each engine wait for its slot.
 */
describe('queue_position, started_at and metrics', () => {
  let world: WorkerWorld;
  let api: RunningService;
  let client: Client;
  let key: string;
  /** By the sha256 of a job's image: what the fake model does (default: runs until canceled). */
  const plans = new Map<string, number>();

  beforeAll(async () => {
    world = await WorkerWorld.create(
      (request) => {
        const delayMs = plans.get(Object.values(request.images)[0]);
        return delayMs === undefined ? { kind: 'hang' } : { kind: 'succeed', delayMs };
      },
      { concurrency: 4 },
    );
    const settings = twoEngines(world.fake.url);
    const workerSettings = { ...settings, WORKER_CONCURRENCY: '8' };
    [api] = await Promise.all([
      world.processes.start('api', settings),
      world.processes.start('worker', workerSettings),
      world.processes.start('worker', workerSettings),
    ]);
    ({ key } = await createUser(world.env));
    client = new Client(api.baseUrl, key);
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
  }, 60_000);

  async function job(tool: 'fashion_card' | 'default', delayMs?: number): Promise<string> {
    const image = await uniqueImage();
    if (delayMs !== undefined) plans.set(sha256(image), delayMs);
    const field = tool === 'fashion_card' ? 'clothes' : 'image';
    return client.createJob({ tool, [field]: { data: image, filename: 'photo.png', contentType: 'image/png' } });
  }

  async function items(ids: readonly string[]): Promise<HistoryItemBody[]> {
    return Promise.all(ids.map(async (id) => (await client.get(id)).body));
  }

  /**
   * Waits until exactly one of these jobs (of one engine, in creation order) has started and the others stand in line
   * behind it, numbered 1, 2, 3... in the order they came; resolves the started one and the others.
   */
  async function oneStarted(ids: readonly string[]): Promise<{ running: HistoryItemBody; queued: HistoryItemBody[] }> {
    let seen: HistoryItemBody[] = [];
    const places = () => seen.filter((item) => item.started_at === null).map((item) => item.queue_position);
    await waitUntil(async () => {
      seen = await items(ids);
      const inOrder = places().every((position, index) => position === index + 1);
      return seen.filter((item) => item.started_at !== null).length === 1 && inOrder;
    }, 'one job to run and the others to stand in line 1, 2, 3...');
    return {
      running: seen.find((item) => item.started_at !== null)!,
      queued: seen.filter((item) => item.started_at === null),
    };
  }

  it('numbers the jobs waiting for an engine 1, 2, 3 in the order they came, each engine its own line', async () => {
    const lineA = [await job('fashion_card'), await job('fashion_card'), await job('fashion_card')];
    const lineA4 = await job('fashion_card');
    const lineB = [await job('default'), await job('default')];

    const a = await oneStarted([...lineA, lineA4]);
    const b = await oneStarted(lineB);

    expect(a.running).toMatchObject({ status: 'pending', queue_position: null, metrics: null });
    expect(a.queued).toHaveLength(3);
    // Line b is its own: its waiting job is next there, whatever line a holds.
    expect(b.queued.map((item) => item.queue_position)).toEqual([1]);
    expect(b.running.queue_position).toBeNull();
    // The list shows the same places as the item reads.
    const listed = (await client.list('status=pending&limit=100')).body.items;
    for (const item of a.queued) {
      expect(listed.find((entry) => entry.history_item_id === item.history_item_id)?.queue_position).toBe(
        item.queue_position,
      );
    }

    // Clean up: every job of both lines ends, the queued ones without running.
    for (const id of [...lineA, lineA4, ...lineB]) await client.cancel(id);
  }, 60_000);

  it('moves the jobs behind up as the one ahead starts or is canceled, on GET and on the event stream', async () => {
    const ids = [
      await job('fashion_card'),
      await job('fashion_card'),
      await job('fashion_card'),
      await job('fashion_card'),
    ];
    const first = await oneStarted(ids);
    const last = first.queued.at(-1)!;
    expect(last.queue_position).toBe(3);
    const stream = await openStream(`${api.baseUrl}/user/generation-history/${last.history_item_id}/events`, key);
    const userStream = await openStream(`${api.baseUrl}/user/events`, key);
    try {
      // A queued job canceled out of turn: the ones behind it move up at once.
      const canceled = (await client.cancel(first.queued[0].history_item_id)).body;
      expect(canceled).toMatchObject({ status: 'error', started_at: null, queue_position: null });
      expect(canceled.metrics).toEqual({ queue_seconds: expect.any(Number), run_seconds: null });
      await waitUntil(
        async () => (await client.get(last.history_item_id)).body.queue_position === 2,
        'the last job to move up',
      );
      // The stream sends a place at most once a second: one that holds is sent.
      await waitUntil(
        () => stream.events.some((event) => (event.data as HistoryItemBody).queue_position === 2),
        'the stream to send the new place',
      );
      // The user's stream tells every queued item's new place too: the last one's among them.
      await waitUntil(
        () =>
          userStream.events.some((event) => {
            const item = event.data as HistoryItemBody;
            return item.history_item_id === last.history_item_id && item.queue_position === 2;
          }),
        "the user's stream to send the new place",
      );

      // The running one ends: the next starts, and the followed job moves up again, or starts itself.
      const ended = new Set([first.queued[0].history_item_id]);
      let running = first.running;
      while (running.history_item_id !== last.history_item_id) {
        const canceledRunning = (await client.cancel(running.history_item_id)).body;
        expect(canceledRunning.started_at).not.toBeNull();
        expect(canceledRunning.metrics?.run_seconds).toEqual(expect.any(Number));
        ended.add(running.history_item_id);
        ({ running } = await oneStarted(ids.filter((id) => !ended.has(id))));
      }
      await waitUntil(
        () => stream.events.some((event) => (event.data as HistoryItemBody).started_at !== null),
        'the stream to send the start',
      );
      const sent = stream.events.map((event) => event.data as HistoryItemBody);
      for (const item of sent) expectMatchesSchema('HistoryItem', item);
      const positions = sent.map((item) => item.queue_position).filter((position) => position !== null);
      // Each place is sent once, falling, from where the stream found it; then the start, without a place.
      expect(positions[0]).toBe(3);
      expect(positions).toEqual([...new Set(positions)].sort((x, y) => y - x));
      expect(sent.at(-1)).toMatchObject({ status: 'pending', queue_position: null });
    } finally {
      stream.close();
      userStream.close();
      for (const id of ids) await client.cancel(id);
    }
  }, 60_000);

  it('gives a finished job its wait and its run, which add up to its time from creation to end', async () => {
    const id = await job('default', 300);

    const item = await client.waitForFinal(id);

    expect(item.status).toBe('complete');
    expect(item.started_at).not.toBeNull();
    const { queue_seconds, run_seconds } = item.metrics!;
    const total = (Date.parse(item.completed_at!) - Date.parse(item.created_at)) / 1000;
    expect(queue_seconds + run_seconds!).toBeCloseTo(total, 2);
    expect(run_seconds).toBeGreaterThanOrEqual(0.3);
    expect(queue_seconds).toBeCloseTo((Date.parse(item.started_at!) - Date.parse(item.created_at)) / 1000, 2);
  }, 60_000);
});
