import { randomUUID } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { Redis } from 'ioredis';
import { createJob, waitForFinal } from '../../support/client.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { FAST_TIMINGS, query } from '../../support/harness.js';
import { inputsFor } from '../../support/jobs.js';
import { runCli, type RunningService, startService } from '../../support/service.js';
import { type S3Server, startS3Server } from '../../support/s3rver.js';

const CLI_TIMEOUT_MS = 60_000;

/** Every key under the prefix with everything it holds (values, fields, members), as one text to search. */
async function redisContents(redisUrl: string, prefix: string): Promise<string> {
  const redis = new Redis(redisUrl);
  try {
    const parts: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      for (const key of keys) {
        const type = await redis.type(key);
        const content =
          type === 'string'
            ? await redis.get(key)
            : type === 'hash'
              ? await redis.hgetall(key)
              : type === 'list'
                ? await redis.lrange(key, 0, -1)
                : type === 'set'
                  ? await redis.smembers(key)
                  : type === 'zset'
                    ? await redis.zrange(key, 0, -1)
                    : type;
        parts.push(`${key} ${JSON.stringify(content)}`);
      }
      cursor = next;
    } while (cursor !== '0');
    return parts.join('\n');
  } finally {
    redis.disconnect();
  }
}

/** The files under a folder, by their paths inside it; none when there is no folder. */
async function filesIn(folder: string): Promise<string[]> {
  const entries = await readdir(folder, { recursive: true, withFileTypes: true }).catch(() => []);
  return entries.filter((entry) => entry.isFile()).map((entry) => relative(folder, join(entry.parentPath, entry.name)));
}

describe.each([['local storage'], ['S3 (s3rver)']])('igs users delete, with %s', (storage) => {
  let env: TestEnvironment;
  let s3: S3Server | undefined;
  let serviceEnv: Record<string, string>;
  let api: RunningService;
  let worker: RunningService | undefined;
  let doomed: { key: string; id: string; items: string[] };
  let kept: { key: string; item: string };

  function sut(...args: string[]) {
    return runCli(['users', 'delete', ...args], serviceEnv);
  }

  async function createKey(user: string): Promise<string> {
    const result = await runCli(['keys', 'create', '--user', user], serviceEnv);
    expect(result.code).toBe(0);
    return result.stdout.trim();
  }

  /** Every file of the user's items: in the media and input stores, local or in the bucket. */
  async function storedFilesOf(ids: string[]): Promise<string[]> {
    const all = s3
      ? await s3.keys()
      : [
          ...(await filesIn(serviceEnv.MEDIA_ROOT)).map((path) => `media/${path}`),
          ...(await filesIn(serviceEnv.INPUT_ROOT)).map((path) => `inputs/${path}`),
        ];
    return all.filter((path) => ids.some((id) => path.includes(id)));
  }

  async function rowsOf(userId: string): Promise<Record<string, number>> {
    const counts: Record<string, number> = {};
    for (const [table, column] of [
      ['users', 'id'],
      ['api_keys', 'user_id'],
      ['history_items', 'user_id'],
      ['history_counts', 'user_id'],
      ['webhook_secrets', 'user_id'],
    ]) {
      const [{ count }] = await query<{ count: number }>(
        env,
        `SELECT count(*)::int AS count FROM ${table} WHERE ${column} = $1`,
        [userId],
      );
      counts[table] = count;
    }
    return counts;
  }

  beforeAll(async () => {
    env = await createTestEnvironment();
    s3 = storage.startsWith('S3') ? await startS3Server() : undefined;
    serviceEnv = {
      ...env.serviceEnv,
      ...FAST_TIMINGS,
      ...s3?.serviceEnv,
      // A revoked key fails at once, so the removal waits for no cache.
      AUTH_CACHE_TTL_MS: '0',
      // A webhook to a port nothing listens on: its message waits in the queue for a retry.
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      WEBHOOK_RETRY_DELAYS_MS: '600000',
    };
    [api, worker] = await Promise.all([
      startService({ ...serviceEnv, ROLE: 'api' }),
      startService({ ...serviceEnv, ROLE: 'worker' }),
    ]);
    const doomedKey = await createKey('doomed');
    const keptKey = await createKey('kept');
    const inputs = await inputsFor('default');
    const bearer = { Authorization: `Bearer ${doomedKey}` };

    const done = [
      await createJob(api.baseUrl, doomedKey, inputs, { 'Idempotency-Key': 'first-try' }),
      await createJob(api.baseUrl, doomedKey, { ...inputs, webhook_url: 'http://127.0.0.1:9/hook' }),
    ];
    const keptItem = await createJob(api.baseUrl, keptKey, inputs);
    for (const [key, id] of [...done.map((id) => [doomedKey, id]), [keptKey, keptItem]]) {
      expect((await waitForFinal(api.baseUrl, key, id, 45_000)).status).toBe('complete');
    }
    const secret = await fetch(`${api.baseUrl}/user/webhook-secret`, { headers: bearer });
    expect(secret.status).toBe(200);
    await secret.text();
    // No worker from here on: the last job stays pending, with what a worker that died running it left in Redis.
    await worker.stop();
    worker = undefined;
    const pending = await createJob(api.baseUrl, doomedKey, inputs);
    const redis = new Redis(env.redisUrl, { keyPrefix: `${env.redisPrefix}:` });
    await redis.set(`progress:${pending}`, '0.4');
    await redis.set(`engine-run:${pending}`, 'prediction-1');
    // The later runs of a route that runs the model once for each result.
    await redis.hset(`engine-run:${pending}:later`, '1', 'prediction-2');
    // Its engine slot, held far into the future, and its place in the slots' queue (another worker's, whose lease
    // had lapsed), as EngineSlotQueue keeps them.
    await redis.hset('engine-slots:gpu:holders', pending, `${Date.now() + 3_600_000}|gpu`);
    await redis.zadd('engine-slots:gpu:queue', Date.now(), `${randomUUID()}|${pending}`);
    await redis.sadd('engine-slots:engines', 'gpu');
    redis.disconnect();

    const [{ id }] = await query<{ id: string }>(env, 'SELECT id FROM users WHERE name = $1', ['doomed']);
    doomed = { key: doomedKey, id, items: [...done, pending] };
    kept = { key: keptKey, item: keptItem };
  }, 180_000);

  afterAll(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    await s3?.stop();
    await env?.dispose();
  }, 60_000);

  it(
    'without --yes prints what would go and changes nothing',
    async () => {
      const filesBefore = await storedFilesOf(doomed.items);

      const result = await sut('doomed');

      expect(result.code).toBe(0);
      expect(result.stdout).toContain('Would remove user "doomed"');
      expect(result.stdout).toContain('1 key, 1 webhook secret, 3 history items (1 pending');
      expect(await rowsOf(doomed.id)).toMatchObject({ users: 1, api_keys: 1, history_items: 3, webhook_secrets: 1 });
      expect(await storedFilesOf(doomed.items)).toEqual(filesBefore);
      expect(filesBefore.length).toBeGreaterThan(0);
      const redis = await redisContents(env.redisUrl, env.redisPrefix);
      for (const id of [doomed.id, ...doomed.items]) expect(redis).toContain(id);
    },
    CLI_TIMEOUT_MS,
  );

  it(
    'with --yes leaves nothing of the user in PostgreSQL, Redis, the stores or the upload folder',
    async () => {
      const result = await sut('doomed', '--yes');

      expect(result.code).toBe(0);
      expect(result.stdout).toContain('Removed user "doomed" with 1 key, 1 webhook secret, 3 history items');
      expect(result.stdout).toContain('1 pending, canceled first');
      expect(await rowsOf(doomed.id)).toEqual({
        users: 0,
        api_keys: 0,
        history_items: 0,
        history_counts: 0,
        webhook_secrets: 0,
      });
      const redis = await redisContents(env.redisUrl, env.redisPrefix);
      for (const id of [doomed.id, ...doomed.items]) expect(redis).not.toContain(id);
      expect(await storedFilesOf(doomed.items)).toEqual([]);
      expect(await filesIn(serviceEnv.UPLOAD_TMP_DIR)).toEqual([]);
      const refused = await fetch(`${api.baseUrl}/generation/tools`, {
        headers: { Authorization: `Bearer ${doomed.key}` },
      });
      await refused.text();
      expect(refused.status).toBe(401);
    },
    CLI_TIMEOUT_MS,
  );

  it(
    "leaves other users' items and files as they were",
    async () => {
      const item = await fetch(`${api.baseUrl}/user/generation-history/${kept.item}`, {
        headers: { Authorization: `Bearer ${kept.key}` },
      });

      expect(item.status).toBe(200);
      expect(await item.json()).toMatchObject({ status: 'complete' });
      expect(await storedFilesOf([kept.item])).toHaveLength(2);
    },
    CLI_TIMEOUT_MS,
  );

  it(
    'exits 1 for a user that does not exist',
    async () => {
      const result = await sut('doomed', '--yes');

      expect(result.code).toBe(1);
      expect(result.stderr).toContain('No user named "doomed"');
    },
    CLI_TIMEOUT_MS,
  );
});
