import type Bull from 'bull';
import type { TestEnvironment } from '../../support/environment.js';
import type { FakeCog } from '../../support/fake-cog.js';
import { Client } from '../../support/client.js';
import type { RunningService } from '../../support/service.js';
import {
  cogEngine,
  createUser,
  getItem,
  jobSettled,
  mediaFolder,
  pathExists,
  Processes,
  storedInputs,
  submit,
  uniqueImage,
  WorkerWorld,
} from '../../support/harness.js';

/** Long enough to delete the item while the engine works on it. */
const ENGINE_MS = 2500;

describe('deleting an item while its job runs', () => {
  let world: WorkerWorld;
  let env: TestEnvironment;
  let processes: Processes;
  let fake: FakeCog;
  let api: RunningService;
  let queue: Bull.Queue;
  let key: string;

  beforeAll(async () => {
    world = await WorkerWorld.create(() => ({ kind: 'succeed', delayMs: ENGINE_MS }));
    ({ env, processes, fake, queue } = world);
    // One job at a time, so a second job waits in the queue while the first runs.
    [api] = await Promise.all([
      processes.start('api', cogEngine(fake)),
      processes.start('worker', { ...cogEngine(fake), WORKER_CONCURRENCY: '1' }),
    ]);
    ({ key } = await createUser(env));
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
  }, 60_000);

  const remove = (id: string) => new Client(api.baseUrl, key).delete(id);

  /** Reads the item's media paths and its media folder over and over until stopped; collects what it saw. */
  function watchMedia(id: string): { stop(): Promise<string[]> } {
    const seen: string[] = [];
    let running = true;
    const loop = (async () => {
      while (running) {
        for (const file of ['preview.webp', 'stock.jpg']) {
          const response = await fetch(`${api.baseUrl}/media/${id}/${file}`);
          await response.body?.cancel();
          if (response.status !== 404) seen.push(`GET ${file}: ${response.status}`);
        }
        if (await pathExists(mediaFolder(env, id))) seen.push('media folder exists');
      }
    })();
    return {
      async stop() {
        running = false;
        await loop;
        return seen;
      },
    };
  }

  it("throws the running job's result away: no media file ever appears and the item stays gone", async () => {
    const clothes = await uniqueImage();
    const id = await submit(api.baseUrl, key, clothes);
    await fake.waitFor((f) => f.requestsFor(clothes).length === 1, 'the worker to call the engine');
    const watcher = watchMedia(id);

    const deleted = await remove(id);
    expect(deleted.status).toBe(204);
    expect((await getItem(api.baseUrl, key, id)).status).toBe(404);

    // The worker stops the engine call whose result nobody will see.
    await fake.waitFor((f) => f.requestsFor(clothes)[0].aborted, 'the engine call to be aborted');
    await jobSettled(queue, id);
    expect(await watcher.stop()).toEqual([]);

    expect((await getItem(api.baseUrl, key, id)).status).toBe(404);
    expect((await remove(id)).status).toBe(404);
    expect(await storedInputs(env, id)).toEqual([]);
    expect(await pathExists(mediaFolder(env, id))).toBe(false);
    // The engine ran once: a dropped result is not retried.
    expect(fake.requestsFor(clothes)).toHaveLength(1);
  }, 60_000);

  it('drops a queued job before it reaches the engine', async () => {
    const running = await uniqueImage();
    const queued = await uniqueImage();
    const runningId = await submit(api.baseUrl, key, running);
    await fake.waitFor((f) => f.requestsFor(running).length === 1, 'the worker to call the engine');
    const queuedId = await submit(api.baseUrl, key, queued);

    expect((await remove(queuedId)).status).toBe(204);
    await fake.waitFor((f) => f.requestsFor(running)[0].answered, 'the engine to answer', ENGINE_MS + 10_000);
    await jobSettled(queue, runningId);
    await jobSettled(queue, queuedId);

    expect(fake.requestsFor(queued)).toHaveLength(0);
    expect((await getItem(api.baseUrl, key, queuedId)).status).toBe(404);
    expect(await storedInputs(env, queuedId)).toEqual([]);
    expect(await pathExists(mediaFolder(env, queuedId))).toBe(false);
    const survivor = (await getItem(api.baseUrl, key, runningId)).body;
    expect(survivor.status).toBe('complete');
  }, 60_000);
});
