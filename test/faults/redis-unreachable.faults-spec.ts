import { once } from 'node:events';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { type FakeCog, startFakeCog } from '../support/fake-cog.js';
import { freePort, type RunningService } from '../support/service.js';
import {
  cogEngine,
  createUser,
  expectCompleteWithOutputs,
  final,
  listDir,
  Processes,
  query,
  submit,
  TOOL,
  uniqueImage,
  waitUntil,
} from '../support/harness.js';
import { bearer, postJob } from '../support/client.js';

/** A TCP proxy to Redis that the test can cut (as if Redis went away) and bring back on the same port. */
class RedisProxy {
  private server?: Server;
  private readonly sockets = new Set<Socket>();

  constructor(
    readonly port: number,
    private readonly target: { host: string; port: number },
  ) {}

  async open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = createConnection(this.target);
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('close', () => this.sockets.delete(socket));
        socket.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream).pipe(client);
    });
    server.listen(this.port, '127.0.0.1');
    await once(server, 'listening');
    this.server = server;
  }

  /** No more connections, and every open one dropped. */
  async cut(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    const closed = once(server, 'close');
    server.close();
    for (const socket of this.sockets) socket.destroy();
    await closed;
  }
}

describe('Redis unreachable from the API', () => {
  let env: TestEnvironment;
  let processes: Processes;
  let fake: FakeCog;
  let proxy: RedisProxy;
  let api: RunningService;
  let key: string;
  let userId: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    processes = new Processes(env);
    fake = await startFakeCog();
    const redis = new URL(env.redisUrl);
    proxy = new RedisProxy(await freePort(), { host: redis.hostname, port: Number(redis.port || 6379) });
    await proxy.open();
    // Only the API goes through the proxy; the worker keeps its own way to Redis.
    [api] = await Promise.all([
      processes.start('api', { ...cogEngine(fake), REDIS_URL: `redis://127.0.0.1:${proxy.port}` }),
      processes.start('worker', cogEngine(fake)),
    ]);
    ({ key, userId } = await createUser(env));
  }, 60_000);

  afterAll(async () => {
    await processes?.stopAll();
    await proxy?.cut();
    await fake?.close();
    await env?.dispose();
  }, 60_000);

  it('answers a new job with 503 and Retry-After in time, leaves nothing behind, and recovers', async () => {
    expect((await fetch(`${api.baseUrl}/health/ready`)).status).toBe(200);
    await proxy.cut();

    const clothes = await uniqueImage();
    // Redis stays cut until this request is answered: a 503 is an answer, not a hang until Redis is back.
    const response = await postJob(api.baseUrl, key, {
      tool: TOOL,
      clothes: { data: clothes, filename: 'clothes.png', contentType: 'image/png' },
    });
    const body = await response.text();

    expect(response.status).toBe(503);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(response.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
    expect(JSON.parse(body)).toEqual({
      type: expect.any(String),
      title: expect.any(String),
      status: 503,
      detail: expect.any(String),
      code: 'service_unavailable',
    });
    expect(body).not.toMatch(/\bat |ECONNREFUSED|ioredis|Stream isn't writeable/);
    // Nothing of the refused job was kept.
    expect(await query(env, 'SELECT id FROM history_items WHERE user_id = $1', [userId])).toEqual([]);
    expect(await listDir(env.serviceEnv.INPUT_ROOT)).toEqual([]);
    expect(await listDir(env.serviceEnv.UPLOAD_TMP_DIR)).toEqual([]);
    expect(fake.requestsFor(clothes)).toHaveLength(0);

    const ready = await fetch(`${api.baseUrl}/health/ready`);
    expect(ready.status).toBe(503);
    expect(ready.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await ready.json()).toEqual({
      status: 'error',
      info: { database: expect.objectContaining({ status: 'up' }) },
      error: { queue: expect.objectContaining({ status: 'down' }) },
      details: {
        database: expect.objectContaining({ status: 'up' }),
        queue: expect.objectContaining({ status: 'down' }),
      },
      // Model servers are listed, and never fail readiness; this one still answers.
      engines: { [`cog:${fake.url}`]: { kind: 'cog', status: 'up' } },
    });

    await proxy.open();
    await waitUntil(
      async () => (await fetch(`${api.baseUrl}/health/ready`)).status === 200,
      'the API to be ready again',
    );
    const id = await submit(api.baseUrl, key, clothes);
    await expectCompleteWithOutputs(api.baseUrl, await final(api.baseUrl, key, id));
    expect(await query(env, 'SELECT id FROM history_items WHERE user_id = $1', [userId])).toEqual([{ id }]);
  }, 60_000);

  it('removes what it stored when the queue goes away while the upload is on its way', async () => {
    await waitUntil(async () => (await fetch(`${api.baseUrl}/health/ready`)).status === 200, 'the API to be ready');
    const before = await query(env, 'SELECT id FROM history_items WHERE user_id = $1', [userId]);
    const form = new FormData();
    form.append('tool', TOOL);
    form.append('clothes', new Blob([await uniqueImage()], { type: 'image/png' }), 'clothes.png');
    const encoded = new Response(form);
    const payload = Buffer.from(await encoded.arrayBuffer());
    const tail = payload.subarray(payload.length - 100);
    let finish!: () => void;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(payload.subarray(0, payload.length - 100));
        finish = () => {
          controller.enqueue(tail);
          controller.close();
        };
      },
    });

    // Raw: the body is streamed by hand, so that Redis can go away while the upload is on its way.
    const pending = fetch(`${api.baseUrl}/generation/generate_image_v2/`, {
      method: 'POST',
      body,
      duplex: 'half',
      headers: { ...bearer(key), 'Content-Type': encoded.headers.get('content-type')! },
    });
    // Redis goes away once the upload is being stored.
    await waitUntil(
      async () => (await listDir(env.serviceEnv.UPLOAD_TMP_DIR)).length > 0,
      'the upload to be on its way',
    );
    await proxy.cut();
    finish();
    const response = await pending;
    const text = await response.text();

    expect(response.status).toBe(503);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(response.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
    expect(JSON.parse(text)).toMatchObject({ status: 503, code: 'service_unavailable' });
    expect(await query(env, 'SELECT id FROM history_items WHERE user_id = $1', [userId])).toEqual(before);
    expect(await listDir(env.serviceEnv.INPUT_ROOT)).toEqual([]);
    expect(await listDir(env.serviceEnv.UPLOAD_TMP_DIR)).toEqual([]);

    await proxy.open();
  }, 60_000);
});
