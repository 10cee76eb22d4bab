import { randomUUID } from 'node:crypto';
import { Client } from '../../support/client.js';
import { signedMediaPath } from '../../support/media.js';
import {
  cogEngine,
  getItem,
  jobSettled,
  mediaFolder,
  pathExists,
  storedInputs,
  submit,
  uniqueImage,
  worldForBlock,
} from '../../support/harness.js';

/** Long enough to delete the item while the engine works on it. */
const ENGINE_MS = 2500;

describe('deleting an item while its job runs', () => {
  const block = worldForBlock(() => ({ kind: 'succeed', delayMs: ENGINE_MS }), {
    // One job at a time, so a second job waits in the queue while the first runs.
    services: (fake) => ({ workers: [{ ...cogEngine(fake), WORKER_CONCURRENCY: '1' }] }),
  });

  const remove = (id: string) => new Client(block.api.baseUrl, block.key).delete(id);

  /** Reads the item's media paths and its media folder over and over until stopped; collects what it saw. */
  function watchMedia(id: string): { stop(): Promise<string[]> } {
    const seen: string[] = [];
    let running = true;
    const loop = (async () => {
      while (running) {
        for (const file of ['preview.webp', 'stock.jpg'] as const) {
          const response = await fetch(`${block.api.baseUrl}/${signedMediaPath(block.env.serviceEnv, id, file)}`);
          await response.body?.cancel();
          if (response.status !== 404) seen.push(`GET ${file}: ${response.status}`);
        }
        if (await pathExists(mediaFolder(block.env, id))) seen.push('media folder exists');
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
    const { env, fake, queue, api, key } = block;
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
    const { env, fake, queue, api, key } = block;
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

  it('drops a job for an item the database does not have, and the log says why it may have come', async () => {
    // What a worker gets from a deployment whose processes share this Redis and REDIS_PREFIX by mistake.
    const { fake, queue, workers } = block;
    const foreign = randomUUID();
    const modelCalls = fake.requests.length;
    await queue.add('generate', { historyItemId: foreign }, { jobId: foreign });
    await jobSettled(queue, foreign);

    expect(fake.requests).toHaveLength(modelCalls);
    const logged = workers[0]
      .output()
      .split('\n')
      .filter((line) => line.includes(foreign) && line.includes('REDIS_PREFIX'));
    expect(logged).toHaveLength(1);
    expect(JSON.parse(logged[0])).toMatchObject({ level: 40, id: foreign });
  }, 30_000);
});
