import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { FAIR_SHARE } from '../../../src/users/fair-share.js';
import { type ClientRequest, type IncomingMessage, request as httpRequest } from 'node:http';
import { expectMatchesContract } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { type OpenStream, openStream } from '../../support/event-stream.js';
import { query, waitUntil } from '../../support/harness.js';
import { inputsFor } from '../../support/jobs.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { filesUnder, retryAfterSeconds } from '../../support/uploads.js';
import { bearer, Client, CREATE_PATH, type FormValue, type ProblemBody, postJob } from '../../support/client.js';

const ITEM = '/user/generation-history/{id}';
const ITEM_EVENTS = '/user/generation-history/{id}/events';
const USER_EVENTS = '/user/events';
/** Each user's share at once in these services: two of each. */
const SHARE = '2';

/** The 429 a request over the user's share gets: the contract's problem, with a Retry-After. */
async function expectOverShare(response: Response, method: string, path: string): Promise<ProblemBody> {
  expect(response.status).toBe(429);
  expect(retryAfterSeconds(response)).toBeGreaterThanOrEqual(1);
  const body = (await expectMatchesContract(response, method, path)) as ProblemBody;
  expect(body).toMatchObject({ status: 429, code: 'too_many_concurrent_requests' });
  return body;
}

/** A job's multipart body, as a browser would send it. */
function multipartBody(fields: Record<string, FormValue>): { body: Buffer; contentType: string } {
  const boundary = `----igs-fair-share-${randomUUID()}`;
  const parts = Object.entries(fields).map(([name, value]) =>
    typeof value === 'string'
      ? Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`)
      : Buffer.concat([
          Buffer.from(
            `--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="${name}.png"\r\n` +
              `Content-Type: ${value.contentType ?? 'application/octet-stream'}\r\n\r\n`,
          ),
          value.data,
          Buffer.from('\r\n'),
        ]),
  );
  return {
    body: Buffer.concat([...parts, Buffer.from(`--${boundary}--\r\n`)]),
    contentType: `multipart/form-data; boundary=${boundary}`,
  };
}

/** A job creation whose body arrives slowly: all but its last bytes sent at once, the rest when the test says. */
interface SlowUpload {
  /** Sends the rest of the body; resolves with the answer's status. */
  finish(): Promise<number>;
  /** The client goes away mid-upload. */
  abort(): void;
}

function startSlowUpload(baseUrl: string, key: string, fields: Record<string, FormValue>): SlowUpload {
  const { body, contentType } = multipartBody(fields);
  const url = new URL(CREATE_PATH, baseUrl);
  const request: ClientRequest = httpRequest(url, {
    method: 'POST',
    agent: false,
    headers: { ...bearer(key), 'Content-Type': contentType, 'Content-Length': String(body.length) },
  });
  const answered = new Promise<IncomingMessage>((resolve, reject) => {
    request.once('response', resolve);
    request.once('error', reject);
  });
  // Nothing to handle when the test aborts it.
  answered.catch(() => {});
  // The body's last bytes are its closing boundary: the file part has all been sent.
  const rest = 10;
  request.write(body.subarray(0, body.length - rest));
  return {
    async finish() {
      request.end(body.subarray(body.length - rest));
      const response = await answered;
      response.resume();
      return response.statusCode!;
    },
    abort: () => request.destroy(),
  };
}

/** Waits until the service has `n` uploads under way: each has begun writing its temporary file. */
async function uploadsUnderWay(env: TestEnvironment, n: number): Promise<void> {
  await waitUntil(async () => (await filesUnder(env.serviceEnv.UPLOAD_TMP_DIR)).length >= n, `${n} uploads under way`);
}

/** Waits until the owner of item `id` has `n` requests held by `Prefer: wait`: their leases in Redis, any replica's. */
async function heldUnderWay(env: TestEnvironment, id: string, n: number): Promise<void> {
  const [{ userId }] = await query<{ userId: string }>(
    env,
    'SELECT user_id AS "userId" FROM history_items WHERE id = $1',
    [id],
  );
  const redis = new Redis(env.redisUrl);
  try {
    const key = `${env.redisPrefix}:${FAIR_SHARE}held:${userId}`;
    await waitUntil(async () => (await redis.zcard(key)) >= n, `${n} requests held`);
  } finally {
    redis.disconnect();
  }
}

/** A request held by `Prefer: wait`, abortable by its client. */
interface HeldRequest {
  answered: Promise<number>;
  abort(): void;
}

function holdRead(baseUrl: string, key: string, id: string, seconds = 60): HeldRequest {
  const controller = new AbortController();
  const answered = fetch(`${baseUrl}/user/generation-history/${id}`, {
    headers: { ...bearer(key), Prefer: `wait=${seconds}` },
    signal: controller.signal,
  }).then(async (response) => {
    await response.arrayBuffer();
    return response.status;
  });
  answered.catch(() => {});
  return { answered, abort: () => controller.abort() };
}

/** Reads the item with `Prefer: wait=1` (a wait that ends soon when let in): 429 once the user's share is held. */
function probeRead(baseUrl: string, key: string, id: string): Promise<Response> {
  return fetch(`${baseUrl}/user/generation-history/${id}`, { headers: { ...bearer(key), Prefer: 'wait=1' } });
}

/** Tries `attempt` until it answers `status`, as a client honouring Retry-After would, only sooner. */
async function until(attempt: () => Promise<Response>, status: number, what: string): Promise<Response> {
  let last: Response | undefined;
  await waitUntil(
    async () => {
      last = await attempt();
      if (last.status === status) return true;
      await last.body?.cancel();
      return false;
    },
    what,
    40_000,
  );
  return last!;
}

/** Opens the stream as soon as the user's share lets it in. */
async function openWhenLetIn(url: string, key: string): Promise<OpenStream> {
  let stream: OpenStream | undefined;
  await waitUntil(async () => {
    stream = await openStream(url, key);
    return stream.status === 200;
  }, `a stream let in at ${url}`);
  return stream!;
}

describe('fair share per user: uploads, event streams and held requests at once', () => {
  let env: TestEnvironment;
  let apiA: RunningService;
  let apiB: RunningService;

  beforeAll(async () => {
    env = await createTestEnvironment();
    // Two API replicas and no worker: every job stays pending, so item streams and waits stay open.
    const settings = {
      ...env.serviceEnv,
      ROLE: 'api',
      LIMIT_CONCURRENT_UPLOADS: SHARE,
      LIMIT_EVENT_STREAMS: SHARE,
      LIMIT_HELD_REQUESTS: SHARE,
    };
    [apiA, apiB] = await Promise.all([startService(settings), startService(settings)]);
  }, 60_000);

  afterAll(async () => {
    await Promise.all([apiA?.stop(), apiB?.stop()]);
    await env?.dispose();
  }, 60_000);

  async function pendingItem(key: string): Promise<string> {
    const response = await postJob(apiA.baseUrl, key, await inputsFor('default'));
    expect(response.status).toBe(202);
    return ((await response.json()) as { history_item_id: string }).history_item_id;
  }

  it('refuses a third upload in progress on either replica, and takes one again once an upload ended', async () => {
    const key = await createUserWithKey(env.databaseUrl);
    const otherKey = await createUserWithKey(env.databaseUrl);
    const fields = await inputsFor('default');
    const slow = [startSlowUpload(apiA.baseUrl, key, fields), startSlowUpload(apiA.baseUrl, key, fields)];
    await uploadsUnderWay(env, 2);

    await expectOverShare(await postJob(apiB.baseUrl, key, fields), 'POST', CREATE_PATH);
    await expectOverShare(await postJob(apiA.baseUrl, key, fields), 'POST', CREATE_PATH);
    // Another user's uploads are theirs.
    expect((await postJob(apiB.baseUrl, otherKey, fields)).status).toBe(202);
    // The refused creations made nothing: the history holds no job yet.
    expect((await new Client(apiA.baseUrl, key).list()).body.total).toBe(0);

    // One client goes away mid-upload, the other's upload completes.
    slow[0].abort();
    expect(await until(() => postJob(apiB.baseUrl, key, fields), 202, 'an upload after one was aborted')).toBeDefined();
    expect(await slow[1].finish()).toBe(202);
    expect((await postJob(apiB.baseUrl, key, fields)).status).toBe(202);
    expect((await new Client(apiA.baseUrl, key).list()).body.total).toBe(3);
  }, 60_000);

  it('refuses a third event stream, item and user streams alike, and opens one again once a stream closed', async () => {
    const key = await createUserWithKey(env.databaseUrl);
    const otherKey = await createUserWithKey(env.databaseUrl);
    const id = await pendingItem(key);
    const streams: OpenStream[] = [];
    try {
      streams.push(await openStream(`${apiA.baseUrl}/user/generation-history/${id}/events`, key));
      streams.push(await openStream(`${apiA.baseUrl}/user/events`, key));
      expect(streams.map((stream) => stream.status)).toEqual([200, 200]);

      const overItem = await fetch(`${apiB.baseUrl}/user/generation-history/${id}/events`, { headers: bearer(key) });
      expect((await expectOverShare(overItem, 'GET', ITEM_EVENTS)).detail).toBe(
        'At most 2 event streams may be open at once; close one first.',
      );
      await expectOverShare(await fetch(`${apiA.baseUrl}/user/events`, { headers: bearer(key) }), 'GET', USER_EVENTS);
      const other = await openStream(`${apiB.baseUrl}/user/events`, otherKey);
      streams.push(other);
      expect(other.status).toBe(200);

      const openAnother = () => fetch(`${apiB.baseUrl}/user/events`, { headers: bearer(key) });
      // The service ends the item's stream (the item is deleted): a new stream is let in, and the share is full again.
      expect((await new Client(apiB.baseUrl, key).delete(id)).status).toBe(204);
      await streams[0].ended;
      streams.push(await openWhenLetIn(`${apiB.baseUrl}/user/events`, key));
      await expectOverShare(await openAnother(), 'GET', USER_EVENTS);
      // The client closes a stream: a new one is let in too.
      streams[1].close();
      const afterClose = await until(openAnother, 200, 'a stream after one was closed');
      await afterClose.body?.cancel();
    } finally {
      for (const stream of streams) stream.close();
    }
  }, 60_000);

  it('refuses a third request held by Prefer: wait, reads and creations alike, and holds one again once one ended', async () => {
    const key = await createUserWithKey(env.databaseUrl);
    const otherKey = await createUserWithKey(env.databaseUrl);
    const id = await pendingItem(key);
    const otherId = await pendingItem(otherKey);
    const held = [holdRead(apiA.baseUrl, key, id), holdRead(apiA.baseUrl, key, id)];
    try {
      // Both held before the probe: a probe sent sooner would itself take a place, and refuse one of them instead.
      await heldUnderWay(env, id, 2);
      const refused = await probeRead(apiB.baseUrl, key, id);
      expect((await expectOverShare(refused, 'GET', ITEM)).detail).toBe(
        'At most 2 requests may wait (Prefer: wait) at once; retry when one has been answered.',
      );
      // A creation with Prefer: wait is refused before its upload is read, and creates nothing.
      const creation = await postJob(apiB.baseUrl, key, await inputsFor('default'), { Prefer: 'wait=5' });
      await expectOverShare(creation, 'POST', CREATE_PATH);
      expect((await new Client(apiB.baseUrl, key).list()).body.total).toBe(1);
      // A read without Prefer is never refused for it, and another user's waits are theirs.
      expect((await new Client(apiB.baseUrl, key).get(id)).status).toBe(200);
      expect((await probeRead(apiB.baseUrl, otherKey, otherId)).status).toBe(200);

      // One client gives up waiting: a new wait is let in.
      held[0].abort();
      const again = await until(() => probeRead(apiB.baseUrl, key, id), 200, 'a held request after one was aborted');
      expect(again.headers.get('preference-applied')).toBe('wait=1');
      await again.body?.cancel();
    } finally {
      for (const request of held) request.abort();
    }
  }, 60_000);

  it("gives a replica's shares back when it shuts down, and lets a killed replica's lapse", async () => {
    const key = await createUserWithKey(env.databaseUrl);
    const settings = { ...env.serviceEnv, ROLE: 'api', LIMIT_EVENT_STREAMS: SHARE };
    const [draining, killed] = await Promise.all([startService(settings), startService(settings)]);
    const url = (api: RunningService) => `${api.baseUrl}/user/events`;
    const streams: OpenStream[] = [];
    try {
      streams.push(await openStream(url(draining), key), await openStream(url(draining), key));
      expect(streams.map((stream) => stream.status)).toEqual([200, 200]);
      await expectOverShare(await fetch(url(apiA), { headers: bearer(key) }), 'GET', USER_EVENTS);

      // SIGTERM: the replica ends its streams (asking their clients to reconnect elsewhere) and gives their shares back.
      expect(await draining.stop()).toBe(0);
      await Promise.all(streams.map((stream) => stream.ended));
      streams.length = 0;
      streams.push(await openStream(url(killed), key), await openStream(url(killed), key));
      expect(streams.map((stream) => stream.status)).toEqual([200, 200]);
      await expectOverShare(await fetch(url(apiA), { headers: bearer(key) }), 'GET', USER_EVENTS);

      // SIGKILL: nothing is given back, and nothing renewed: the leases lapse.
      await killed.stop('SIGKILL');
      const after = await until(() => fetch(url(apiA), { headers: bearer(key) }), 200, "a killed replica's leases");
      await after.body?.cancel();
    } finally {
      for (const stream of streams) stream.close();
      await Promise.all([draining.stop('SIGKILL'), killed.stop('SIGKILL')]);
    }
  }, 90_000);
});
