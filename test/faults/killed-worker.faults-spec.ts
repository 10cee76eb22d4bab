import { sha256 } from '../support/fake-cog.js';
import {
  cogEngine,
  expectCompleteWithOutputs,
  final,
  getItem,
  listDir,
  mediaFolder,
  storedInputs,
  streamSettings,
  submit,
  uniqueImage,
  waitUntil,
  worldForBlock,
} from '../support/harness.js';
import { millisSince, recordStalls, report, statusCounts } from '../support/observe.js';

describe('a worker killed (SIGKILL)', () => {
  describe('in the middle of a job', () => {
    /** Long enough to kill the worker while the engine is busy with the job. */
    const ENGINE_MS = 3000;

    const block = worldForBlock(() => ({ kind: 'succeed', delayMs: ENGINE_MS }), {
      queue: false,
      services: (fake) => ({ workers: [cogEngine(fake)] }),
    });

    it('hands the job to another worker, which completes it exactly once', async () => {
      const { env, processes, fake, api, key } = block;
      const [sut] = block.workers;
      const clothes = await uniqueImage();
      const id = await submit(api.baseUrl, key, clothes);
      await fake.waitFor((f) => f.requestsFor(clothes).length === 1, 'the first worker to call the engine');

      expect(await sut.stop('SIGKILL')).toBeNull();
      expect(sut.process.signalCode).toBe('SIGKILL');
      await fake.waitFor((f) => f.requestsFor(clothes)[0].aborted, 'the killed worker to drop its connection');
      // The killed worker never wrote a result; the item is still waiting for one.
      const meanwhile = (await getItem(api.baseUrl, key, id)).body;
      expect(meanwhile.status).toBe('pending');

      await processes.start('worker', cogEngine(fake));
      const item = await final(api.baseUrl, key, id);

      await expectCompleteWithOutputs(api.baseUrl, item);
      const calls = fake.requestsFor(clothes);
      expect(calls).toHaveLength(2);
      expect(calls[0]).toMatchObject({ aborted: true, answered: false });
      expect(calls[1]).toMatchObject({ aborted: false, answered: true });
      // One set of outputs, no temporary files left behind; the inputs are gone once the job is done.
      expect(await listDir(mediaFolder(env, id))).toEqual(['preview.webp', 'stock.jpg']);
      expect(await storedInputs(env, id)).toEqual([]);
      // Completed once: later reads give the same completion time.
      const again = await final(api.baseUrl, key, id);
      expect(again.completed_at).toBe(item.completed_at);
      expect(again.updated_at).toBe(item.updated_at);
    }, 60_000);
  });

  describe('in the middle of a stream of jobs', () => {
    const JOBS = 100;
    const ENGINE_MS = 100;
    const CONCURRENCY = 4;
    /** One new job this often. */
    const SUBMIT_EVERY_MS = 50;
    /**
     * The worker dies once this many jobs were sent and accepted, and the engine answered `KILL_AFTER_ANSWERS` of
     * them; the engine holds every later one until the kill, so the worker dies with `CONCURRENCY` jobs in it.
     */
    const KILL_AFTER_ACCEPTED = 40;
    const KILL_AFTER_ANSWERS = 10;
    /** The rest of the stream is sent after the kill; a worker starts again once this many of them were accepted. */
    const ACCEPTED_WHILE_DOWN = 10;

    let stalled: string[];

    const block = worldForBlock(() => ({ kind: 'succeed', delayMs: ENGINE_MS }), {
      concurrency: CONCURRENCY,
      services: (fake) => ({ api: streamSettings(fake, CONCURRENCY) }),
    });

    beforeAll(async () => {
      stalled = await recordStalls(block.queue);
    });

    it(`completes all ${JOBS} jobs once the worker is restarted, each with one set of outputs`, async () => {
      const { env, processes, fake, queue, api, key } = block;
      const images = await Promise.all(Array.from({ length: JOBS }, () => uniqueImage()));
      // The fake tells jobs apart by their image.
      expect(new Set(images.map(sha256)).size).toBe(JOBS);
      let endHold!: () => void;
      const killed = new Promise<void>((resolve) => (endHold = resolve));
      fake.behave((request) => ({
        kind: 'succeed',
        delayMs: ENGINE_MS,
        until: request.seq > KILL_AFTER_ANSWERS ? killed : undefined,
      }));
      const worker = await processes.start('worker', streamSettings(fake, CONCURRENCY));
      const started = performance.now();

      // Open loop: the client does not wait for one job before sending the next.
      let lastAcceptedAt = 0;
      let accepted = 0;
      const send = (batch: Buffer[]) =>
        batch.map(async (clothes, index) => {
          await new Promise((resolve) => setTimeout(resolve, index * SUBMIT_EVERY_MS));
          const id = await submit(api.baseUrl, key, clothes);
          lastAcceptedAt = Math.max(lastAcceptedAt, millisSince(started));
          accepted++;
          return id;
        });
      const beforeKill = send(images.slice(0, KILL_AFTER_ACCEPTED));

      // Killed with jobs in the engine, so that some jobs die with it.
      await fake.waitFor(
        (f) =>
          accepted === KILL_AFTER_ACCEPTED &&
          f.requests.filter((request) => request.answered).length >= KILL_AFTER_ANSWERS &&
          f.inFlight().length === CONCURRENCY,
        `${KILL_AFTER_ACCEPTED} jobs accepted, ${KILL_AFTER_ANSWERS} engine answers and ${CONCURRENCY} calls held`,
      );
      const inFlightAtKill = fake.inFlight().length;
      expect(await worker.stop('SIGKILL')).toBeNull();
      endHold();
      const killedAt = millisSince(started);
      const seenAtKill = fake.requests.length;
      // A call about to be answered may still get its answer written before the fake notices the closed connection.
      await fake.waitFor((f) => f.inFlight().length === 0, 'the killed worker to drop its engine calls');
      const abortedAtKill = fake.requests.filter((request) => request.aborted).length;
      const pendingAtKill = (await statusCounts(env)).pending;

      // Jobs keep arriving while no worker runs.
      const afterKill = send(images.slice(KILL_AFTER_ACCEPTED));
      await waitUntil(
        () => accepted >= KILL_AFTER_ACCEPTED + ACCEPTED_WHILE_DOWN,
        `${ACCEPTED_WHILE_DOWN} jobs to be accepted while no worker runs`,
      );
      await processes.start('worker', streamSettings(fake, CONCURRENCY));
      const restartedAt = millisSince(started);

      const ids = await Promise.all([...beforeKill, ...afterKill]);
      await waitUntil(async () => (await statusCounts(env)).pending === undefined, 'no item to be pending', 60_000);
      const drainedAt = millisSince(started);

      const callsPerJob = images.map((clothes) => fake.requestsFor(clothes).length);
      const ranTwice = images.filter((_, index) => callsPerJob[index] > 1);
      report('killed worker', {
        jobs: JOBS,
        'engine ms / worker concurrency': `${ENGINE_MS} / ${CONCURRENCY}`,
        'killed at (ms), jobs accepted by then': `${killedAt}, ${KILL_AFTER_ACCEPTED}`,
        'engine calls before kill': seenAtKill,
        'engine calls in flight at the kill / cut before their answer': `${inFlightAtKill} / ${abortedAtKill}`,
        'items pending just after the kill': pendingAtKill,
        'worker restarted at (ms)': restartedAt,
        'last job accepted at (ms)': lastAcceptedAt,
        'all complete at (ms)': drainedAt,
        'jobs found stalled (taken back from the killed worker)': new Set(stalled).size,
        'jobs whose engine ran twice': ranTwice.length,
        'engine calls in total': fake.requests.length,
      });

      expect(await statusCounts(env)).toEqual({ complete: JOBS });
      for (const [index, id] of ids.entries()) {
        const item = await final(api.baseUrl, key, id);
        await expectCompleteWithOutputs(api.baseUrl, item);
        // One set of outputs: the two files and nothing else (no second copy, no temporary file left behind).
        expect(await listDir(mediaFolder(env, id))).toEqual(['preview.webp', 'stock.jpg']);
        expect(await storedInputs(env, id)).toEqual([]);
        expect(fake.requestsFor(images[index]).some((request) => request.answered)).toBe(true);
      }
      expect(await queue.getJobCounts()).toMatchObject({ waiting: 0, active: 0, delayed: 0, failed: 0 });

      // Only jobs the killed worker had already taken ran again.
      const firstCallSeq = (clothes: Buffer) => fake.requestsFor(clothes)[0].seq;
      for (const clothes of ranTwice) expect(firstCallSeq(clothes)).toBeLessThanOrEqual(seenAtKill);
      expect(Math.max(...callsPerJob)).toBeLessThanOrEqual(2);
      // The jobs the dead worker held were taken back as stalled jobs, and only those.
      expect(new Set(stalled).size).toBeGreaterThan(0);
      expect(new Set(stalled).size).toBeGreaterThanOrEqual(ranTwice.length);
      expect(new Set(stalled).size).toBeLessThanOrEqual(CONCURRENCY);
    }, 120_000);
  });
});
