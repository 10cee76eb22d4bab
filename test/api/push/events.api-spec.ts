import { expectMatchesContract } from '../../support/contract.js';
import {
  createUser,
  expectNoMedia,
  final,
  getItem,
  submit,
  uniqueImage,
  waitUntil,
  WorkerWorld,
  cogEngine,
} from '../../support/harness.js';
import type { RunningService } from '../../support/service.js';
import { type OpenStream, openStream } from '../../support/event-stream.js';
import { Client, type HistoryItemBody, postJob } from '../../support/client.js';
import { unsignedItem } from '../../support/media.js';

const statusesOf = (stream: OpenStream) =>
  stream.events.map((event) => (event.data as HistoryItemBody).status ?? event.event);

/**
 * What a stream's events tell of their item, in turn: `pending` while queued, `started` once a worker runs it, then
 * its final status (or `deleted`). A queued item's moves in line, and a running one's progress, are the same phase.
 */
const phasesOf = (events: OpenStream['events']) =>
  events
    .map((event) => {
      const item = event.data as Partial<HistoryItemBody>;
      if (event.event !== 'item') return event.event;
      return item.status === 'pending' && item.started_at ? 'started' : item.status!;
    })
    .filter((phase, index, all) => index === 0 || phase !== all[index - 1]);

describe('push: event streams, Prefer: wait and cancel', () => {
  let world: WorkerWorld;
  let apiA: RunningService;
  let apiB: RunningService;
  let user: { key: string; userId: string };
  let otherUser: { key: string; userId: string };

  beforeAll(async () => {
    world = await WorkerWorld.create();
    // Two API replicas and, started by the tests when they need one, a worker: three processes.
    [apiA, apiB] = await Promise.all([
      world.processes.start('api', { EVENT_STREAM_HEARTBEAT_MS: '300' }),
      world.processes.start('api', { EVENT_STREAM_HEARTBEAT_MS: '300' }),
    ]);
    user = await createUser(world.env);
    otherUser = await createUser(world.env);
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
  }, 60_000);

  async function withWorker<T>(run: (worker: RunningService) => Promise<T>): Promise<T> {
    const worker = await world.processes.start('worker', cogEngine(world.fake));
    try {
      return await run(worker);
    } finally {
      await world.processes.stop(worker);
    }
  }

  describe('GET /user/generation-history/{id}/events', () => {
    it('streams on two API replicas both see a job finished by a worker process, then end', async () => {
      const id = await submit(apiA.baseUrl, user.key, await uniqueImage());
      const url = (api: RunningService) => `${api.baseUrl}/user/generation-history/${id}/events`;
      const [onA, onB] = await Promise.all([openStream(url(apiA), user.key), openStream(url(apiB), user.key)]);
      try {
        expect(onA.status).toBe(200);
        expect(onA.contentType).toMatch(/^text\/event-stream/);
        await waitUntil(() => onA.events.length > 0 && onB.events.length > 0, 'the first event on both streams');
        expect([statusesOf(onA), statusesOf(onB)]).toEqual([['pending'], ['pending']]);

        await withWorker(() => Promise.all([onA.ended, onB.ended]));

        for (const stream of [onA, onB]) {
          expect(phasesOf(stream.events)).toEqual(['pending', 'started', 'complete']);
          expect(stream.events.every((event) => event.event === 'item')).toBe(true);
        }
        // Each event is the item exactly as GET answers it (which the contract check validates), its media URLs
        // signed afresh by each.
        const item = (await getItem(apiA.baseUrl, user.key, id)).body;
        expect(unsignedItem(onA.events.at(-1)!.data as HistoryItemBody)).toEqual(unsignedItem(item));
      } finally {
        onA.close();
        onB.close();
      }
    }, 60_000);

    it('sends a comment line while nothing happens, so proxies keep the stream open', async () => {
      const id = await submit(apiA.baseUrl, user.key, await uniqueImage());
      const stream = await openStream(`${apiB.baseUrl}/user/generation-history/${id}/events`, user.key);
      try {
        await waitUntil(() => stream.comments >= 2, 'two heartbeats', 5_000);
        expect(statusesOf(stream)).toEqual(['pending']);
      } finally {
        stream.close();
        await world.queue.getJob(id).then((job) => job?.remove());
      }
    }, 30_000);

    it('gives a stream opened after the job ended the final item as its only event, then ends', async () => {
      const id = await submit(apiA.baseUrl, user.key, await uniqueImage());
      await withWorker(() => final(apiA.baseUrl, user.key, id));

      const stream = await openStream(`${apiB.baseUrl}/user/generation-history/${id}/events`, user.key);
      await stream.ended;

      expect(statusesOf(stream)).toEqual(['complete']);
    }, 60_000);

    it("answers another user's item 404, as a missing one", async () => {
      const id = await submit(apiA.baseUrl, user.key, await uniqueImage());
      try {
        const answer = await new Client(apiA.baseUrl, otherUser.key).events(id);

        expect(answer.status).toBe(404);
        expect(answer.contentType).toBe('application/problem+json');
        expect(answer.body?.code).toBe('not_found');
      } finally {
        await world.queue.getJob(id).then((job) => job?.remove());
      }
    });
  });

  describe('GET /user/events', () => {
    it("sees the user's own items created, finished and deleted, and nobody else's", async () => {
      const mine = await openStream(`${apiB.baseUrl}/user/events`, user.key);
      try {
        const others = await submit(apiA.baseUrl, otherUser.key, await uniqueImage());
        const id = await submit(apiA.baseUrl, user.key, await uniqueImage());
        await withWorker(() => final(apiA.baseUrl, user.key, id));
        await new Client(apiA.baseUrl, user.key).delete(id);
        await waitUntil(() => mine.events.some((event) => event.event === 'deleted'), 'the deleted event');

        // The worker may also finish jobs earlier tests of this file left pending: only this job's events are counted.
        const ofThisJob = mine.events.filter(
          (event) => (event.data as { history_item_id: string }).history_item_id === id,
        );
        expect(phasesOf(ofThisJob)).toEqual(['pending', 'started', 'complete', 'deleted']);
        expect(JSON.stringify(mine.events)).not.toContain(others);
      } finally {
        mine.close();
      }
    }, 60_000);
  });

  describe('many at once', () => {
    it('holds a dozen streams and a dozen waiting requests with no warning of a listener leak', async () => {
      const id = await submit(apiA.baseUrl, user.key, await uniqueImage());
      const streams = await Promise.all(
        Array.from({ length: 12 }, () => openStream(`${apiA.baseUrl}/user/events`, user.key)),
      );
      try {
        const client = new Client(apiA.baseUrl, user.key);
        const waits = await Promise.all(Array.from({ length: 12 }, () => client.get(id, 1)));
        expect(waits.map((answer) => answer.body.status)).toEqual(Array(12).fill('pending'));
        expect(streams.map((stream) => stream.status)).toEqual(Array(12).fill(200));
        await waitUntil(() => streams.every((stream) => stream.comments > 0), 'a heartbeat on every stream');
        expect(apiA.output()).not.toContain('MaxListenersExceededWarning');
      } finally {
        for (const stream of streams) stream.close();
        await world.queue.getJob(id).then((job) => job?.remove());
      }
    }, 30_000);
  });

  describe('Prefer: wait', () => {
    it('on the item GET, answers as soon as the job ends, with Preference-Applied', async () => {
      const id = await submit(apiA.baseUrl, user.key, await uniqueImage());
      const held = new Client(apiB.baseUrl, user.key).get(id, 30);
      // The job cannot end before a worker runs it: the answer must still be held once the worker is up.
      const answer = await withWorker(() => held);

      expect(answer.status).toBe(200);
      expect(answer.headers.get('preference-applied')).toBe('wait=30');
      // Answered with the ended item, not the pending one the 30 s wait would end with.
      expect(answer.body.status).toBe('complete');
    }, 60_000);

    it('on the item GET, answers the pending item after N seconds when the job has not ended', async () => {
      const id = await submit(apiA.baseUrl, user.key, await uniqueImage());
      try {
        const started = Date.now();
        const answer = await new Client(apiA.baseUrl, user.key).get(id, 1);

        expect(answer.status).toBe(200);
        expect(answer.body.status).toBe('pending');
        expect(Date.now() - started).toBeGreaterThanOrEqual(1000);
      } finally {
        await world.queue.getJob(id).then((job) => job?.remove());
      }
    });

    it('on job creation, answers 200 with the final status when the job ends within N seconds', async () => {
      await withWorker(async () => {
        const clothes = { data: await uniqueImage(), filename: 'clothes.png', contentType: 'image/png' };
        const response = await postJob(
          apiA.baseUrl,
          user.key,
          { tool: 'fashion_card', clothes },
          { Prefer: 'wait=20' },
        );
        expect(response.status).toBe(200);
        expect(response.headers.get('preference-applied')).toBe('wait=20');
        const body = await expectMatchesContract(response, 'POST', '/generation/generate_image_v2/');
        expect(body).toMatchObject({ status: 'complete' });
      });
    }, 60_000);

    it('refuses a wait outside 1..60 with 400 naming Prefer, before reading the upload', async () => {
      const answer = await new Client(apiA.baseUrl, user.key).get(crypto.randomUUID(), 61);

      expect(answer.status).toBe(400);
      expect(answer.body).toMatchObject({ code: 'validation_failed', errors: [{ field: 'Prefer' }] });
    });
  });

  describe('POST /user/generation-history/{id}/cancel', () => {
    const cancel = (api: RunningService, key: string, id: string) => new Client(api.baseUrl, key).cancel(id);

    it('ends a queued job as canceled; it never runs, and its stream says so', async () => {
      const image = await uniqueImage();
      const id = await submit(apiA.baseUrl, user.key, image);
      const stream = await openStream(`${apiB.baseUrl}/user/generation-history/${id}/events`, user.key);
      // The stream's first event is the item as it is when the stream reads it: wait for it, so it is the pending one.
      await waitUntil(() => stream.events.length > 0, 'the first event');

      const response = await cancel(apiA, user.key, id);
      await stream.ended;

      expect(response.status).toBe(200);
      expect(response.body).toMatchObject({ status: 'error', error: { code: 'canceled' } });
      expect(phasesOf(stream.events)).toEqual(['pending', 'error']);
      await withWorker(() => new Promise((resolve) => setTimeout(resolve, 1500)));
      expect(world.fake.requestsFor(image)).toEqual([]);
      await expectNoMedia(world.env, apiA.baseUrl, id);
    }, 60_000);

    it("stops a running job's engine call and throws its result away", async () => {
      world.fake.behave(() => ({ kind: 'hang' }));
      const image = await uniqueImage();
      const id = await submit(apiA.baseUrl, user.key, image);
      await withWorker(async () => {
        await world.fake.waitFor((fake) => fake.requestsFor(image).length > 0, 'the engine call');

        const response = await cancel(apiB, user.key, id);

        expect(response.status).toBe(200);
        await world.fake.waitFor(() => world.fake.requestsFor(image)[0].aborted, 'the engine call to be aborted');
      });
      world.fake.behave(() => ({ kind: 'succeed' }));
      const item = (await getItem(apiA.baseUrl, user.key, id)).body;
      expect(item).toMatchObject({ status: 'error', error: { code: 'canceled' } });
      expect(world.fake.requestsFor(image)).toHaveLength(1);
      await expectNoMedia(world.env, apiA.baseUrl, id);
    }, 60_000);

    it("answers 409 not_pending for a final job, and 404 for another user's", async () => {
      const id = await submit(apiA.baseUrl, user.key, await uniqueImage());
      await withWorker(() => final(apiA.baseUrl, user.key, id));

      const again = await cancel(apiA, user.key, id);
      const foreign = await cancel(apiA, otherUser.key, id);

      expect(again.status).toBe(409);
      expect(again.body.code).toBe('not_pending');
      expect(foreign.status).toBe(404);
      expect((await getItem(apiA.baseUrl, user.key, id)).body).toMatchObject({ status: 'complete' });
    }, 60_000);
  });
});
