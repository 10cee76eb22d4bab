import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import Queue from 'bull';
import { Redis } from 'ioredis';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { openQueue, storedInputs, waitUntil } from '../../support/harness.js';
import { inputsFor } from '../../support/jobs.js';
import { WEBHOOK_QUEUE } from '../../../src/queue/queues.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { fetchMedia } from '../../support/history.js';
import { signedMediaPath } from '../../support/media.js';
import { type Answer, Client, type ProblemBody, postJob, waitForFinal } from '../../support/client.js';

const MISSING_ID = '3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44';

/** Creates a job as a client would (a real upload) and answers its history_item_id. */
async function createJob(baseUrl: string, apiKey: string, fields: Record<string, string> = {}): Promise<string> {
  const response = await postJob(baseUrl, apiKey, { ...(await inputsFor('default')), ...fields });
  const body = (await response.json()) as { history_item_id: string; status: string };
  if (response.status !== 202) throw new Error(`job creation answered ${response.status}: ${JSON.stringify(body)}`);
  return body.history_item_id;
}

/** Files under `root/id`, or undefined when there is no such folder. */
async function filesUnder(root: string, id: string): Promise<string[] | undefined> {
  try {
    return await readdir(join(root, id), { recursive: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

function expectNoContent(answer: Answer<unknown>): void {
  expect(answer.status).toBe(204);
  expect(answer.text).toBe('');
  expect(answer.contentType).toBe('');
}

describe('DELETE /user/generation-history/{id}', () => {
  let env: TestEnvironment;
  let mediaRoot: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    mediaRoot = env.serviceEnv.MEDIA_ROOT;
  }, 60_000);

  afterAll(async () => {
    await env?.dispose();
  }, 60_000);

  describe('a complete item', () => {
    let sut: RunningService;
    let client: Client;
    let id: string;
    let mediaPaths: string[];
    let deleted: Answer<ProblemBody | undefined>;
    let webhooks: Queue.Queue;
    let redis: Redis;

    beforeAll(async () => {
      webhooks = new Queue(WEBHOOK_QUEUE, env.redisUrl, { prefix: `${env.redisPrefix}:bull` });
      redis = new Redis(env.redisUrl);
      sut = await startService(env.serviceEnv);
      const key = await createUserWithKey(env.databaseUrl);
      client = new Client(sut.baseUrl, key);
      // A receiver that cannot be reached: its message waits in the queue for its next try.
      id = await createJob(sut.baseUrl, key, { webhook_url: 'https://hooks.invalid/generation' });
      const item = await waitForFinal(sut.baseUrl, key, id);
      if (item.status !== 'complete') throw new Error(`the job ended ${JSON.stringify(item)}`);
      // The message is queued just after the item turns complete (on the lifecycle's event), so it may lag the GET.
      await waitUntil(async () => (await webhooks.getJob(id)) !== null, 'the webhook message before the delete');
      if ((await redis.get(`${env.redisPrefix}:progress:${id}`)) === null)
        throw new Error('no progress before the delete');
      mediaPaths = [item.preview_url!, item.stock_url!];
      // What the delete is to take away is really there.
      for (const path of mediaPaths) {
        const media = await fetchMedia(sut.baseUrl, path);
        if (media.status !== 200 || media.bytes === 0)
          throw new Error(`${path} answered ${media.status} before the delete`);
      }
      if (!(await filesUnder(mediaRoot, id))?.length) throw new Error('no media files before the delete');

      deleted = await client.delete(id);
    }, 60_000);

    afterAll(async () => {
      await webhooks?.close();
      redis?.disconnect();
      await sut?.stop();
    }, 60_000);

    it('answers 204 with no body', () => {
      expectNoContent(deleted);
    });

    it('is gone: GET answers 404 exactly like a missing id', async () => {
      const gone = await client.get(id);
      const missing = await client.get(MISSING_ID);

      expect(gone.status).toBe(404);
      expect(gone.contentType).toBe('application/problem+json');
      expect(gone.body).toMatchObject({ code: 'not_found' });
      expect(gone.body).toEqual(missing.body);
    });

    it('is no longer listed', async () => {
      const { body } = await client.list();

      expect(body.items.map((item) => item.history_item_id)).not.toContain(id);
      expect(body.total).toBe(0);
    });

    it('makes its media paths answer 404', async () => {
      for (const path of mediaPaths) {
        expect(await fetchMedia(sut.baseUrl, path)).toMatchObject({ status: 404 });
      }
    });

    it('leaves no files of it in the media or input store', async () => {
      expect(await filesUnder(mediaRoot, id)).toBeUndefined();
      expect(await storedInputs(env, id)).toEqual([]);
      expect(existsSync(join(mediaRoot, id))).toBe(false);
    });

    it('leaves nothing of it in Redis: no job, no webhook message still to send, no progress', async () => {
      expect(await webhooks.getJob(id)).toBeNull();
      expect(await redis.keys(`${env.redisPrefix}:*${id}*`)).toEqual([]);
    });

    it('answers a second delete with 404', async () => {
      const again = await client.delete(id);

      expect(again.status).toBe(404);
      expect(again.contentType).toBe('application/problem+json');
      expect(again.body).toMatchObject({ status: 404, code: 'not_found' });
    });

    it('answers feedback on it with 404', async () => {
      const { status } = await client.feedback(id, '{"like": true}');

      expect(status).toBe(404);
    });
  });

  describe('a pending item whose job is still queued', () => {
    let api: RunningService | undefined;
    let all: RunningService | undefined;
    let queue: Queue.Queue;
    let key: string;
    let client: Client;
    let id: string;
    let deleted: Answer<ProblemBody | undefined>;

    beforeAll(async () => {
      queue = openQueue(env);
      // The API alone: the job waits in the queue, no worker takes it.
      api = await startService({ ...env.serviceEnv, ROLE: 'api' });
      key = await createUserWithKey(env.databaseUrl);
      client = new Client(api.baseUrl, key);
      id = await createJob(api.baseUrl, key);
      const item = await client.get(id);
      if (item.body.status !== 'pending') throw new Error(`the item is ${item.body.status}, not pending`);
      const job = await queue.getJob(id);
      if (!job || (await job.getState()) !== 'waiting') throw new Error('the job is not waiting in the queue');
      if ((await storedInputs(env, id)).length === 0) throw new Error('no stored inputs before the delete');

      deleted = await client.delete(id);
    }, 60_000);

    afterAll(async () => {
      await queue?.close();
      await api?.stop();
      await all?.stop();
    }, 60_000);

    it('answers 204 with no body', () => {
      expectNoContent(deleted);
    });

    it('drops the job from the queue', async () => {
      expect(await queue.getJob(id)).toBeNull();
      expect(await queue.getWaitingCount()).toBe(0);
    });

    it('is gone: GET answers 404', async () => {
      const { status, body } = await client.get(id);

      expect(status).toBe(404);
      expect(body).toMatchObject({ code: 'not_found' });
    });

    it('leaves no stored inputs', async () => {
      expect(await storedInputs(env, id)).toEqual([]);
    });

    it('answers a second delete with 404', async () => {
      expect((await client.delete(id)).status).toBe(404);
    });

    it('is never processed by a worker started afterwards', async () => {
      await api!.stop();
      api = undefined;
      // One job at a time: the queue is worked through in order, so once a job queued after the deleted
      // one is complete, the deleted one would have been taken first had it still been queued.
      all = await startService({ ...env.serviceEnv, WORKER_CONCURRENCY: '1' });
      const later = await createJob(all.baseUrl, key);
      expect((await waitForFinal(all.baseUrl, key, later)).status).toBe('complete');

      for (const file of ['preview.webp', 'stock.jpg'] as const) {
        expect(await fetchMedia(all.baseUrl, signedMediaPath(env.serviceEnv, id, file))).toMatchObject({ status: 404 });
      }
      expect(await filesUnder(mediaRoot, id)).toBeUndefined();
      expect(await storedInputs(env, id)).toEqual([]);
      expect(await queue.getJob(id)).toBeNull();
      expect((await new Client(all.baseUrl, key).get(id)).status).toBe(404);
    }, 60_000);
  });
});
