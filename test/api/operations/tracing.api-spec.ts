import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { bearer, postJob } from '../../support/client.js';
import {
  cogEngine,
  createUser,
  final,
  getItem,
  query,
  submit,
  uniqueImage,
  waitUntil,
  WorkerWorld,
} from '../../support/harness.js';
import { signedMediaPath } from '../../support/media.js';
import { type OtlpReceiver, startOtlpReceiver } from '../../support/otlp-receiver.js';
import { startS3Server } from '../../support/s3rver.js';
import type { RunningService } from '../../support/service.js';

/** The port OpenTelemetry's exporters send to when no endpoint is set. */
const DEFAULT_OTLP_PORT = 4318;
/**
 * Spans are exported in batches; a short delay keeps the test quick. So would metrics be, every 100 ms, if the SDK
 * sent any to the endpoint.
 */
const QUICK_EXPORT = { OTEL_BSP_SCHEDULE_DELAY: '100', OTEL_METRIC_EXPORT_INTERVAL: '100', LOG_LEVEL: 'info' };
const WEBHOOKS_ALLOWED = { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' };
const SPAN_KIND = { server: 2, client: 3, producer: 4, consumer: 5 };
/** Where receivers keep a webhook URL's secret: Slack and Discord in its path, others in its query. */
const WEBHOOK_PATH_SECRET = 'T0001-B0002-path-secret';
const WEBHOOK_QUERY_SECRET = 'query-secret-3f9a';
const TRACING = new URL('../../../dist/tracing.js', import.meta.url).href;

/**
 * Starts tracing as the service does in a process of its own, serves one request of each method with a plain
 * `http` server, and resolves with whether OpenTelemetry's http instrumentation took each request: it does by
 * giving the response its own `on` (a copy that wraps each listener in the request's context).
 */
async function requestsTheInstrumentationTakes(endpoint: string): Promise<Record<string, boolean>> {
  const script = `
    (await import(${JSON.stringify(TRACING)})).startTracing({ protocol: 'http/json', serviceName: 'igs-check' });
    const { createServer } = await import('node:http');
    const server = createServer((request, response) => {
      response.setHeader('x-taken', String(Object.hasOwn(response, 'on'))).end();
    }).listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    const taken = {};
    for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'DELETE']) {
      const answer = await fetch('http://127.0.0.1:' + server.address().port + '/', { method });
      taken[method] = answer.headers.get('x-taken') === 'true';
    }
    console.log(JSON.stringify(taken));
    process.exit(0);`;
  const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script], {
    env: { ...process.env, OTEL_EXPORTER_OTLP_ENDPOINT: endpoint },
  });
  return JSON.parse(stdout) as Record<string, boolean>;
}

/** A webhook receiver on loopback that answers 200 to everything. */
async function startWebhookReceiver(): Promise<{ url: string; hits: () => number; close(): Promise<void> }> {
  let hits = 0;
  const server: Server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      hits++;
      response.writeHead(200).end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    hits: () => hits,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * NODE_OPTIONS that make a process write the URL of every module it resolves under `@opentelemetry/` into `file`,
 * through a module resolution hook registered before the service's first module loads.
 */
function recordOpenTelemetryModules(file: string): string {
  const hooks = `export async function resolve(specifier, context, next) {
    const resolved = await next(specifier, context);
    if (resolved.url.includes('/@opentelemetry/')) (await import('node:fs')).appendFileSync(${JSON.stringify(file)}, resolved.url + '\\n');
    return resolved;
  }`;
  const preload = `import { register } from 'node:module'; register(${JSON.stringify(`data:text/javascript,${encodeURIComponent(hooks)}`)});`;
  return `--import=data:text/javascript,${encodeURIComponent(preload)}`;
}

/** JSON log lines of a process's output. */
function logLines(service: RunningService): Record<string, unknown>[] {
  return service
    .output()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, unknown>);
}

async function submitWithWebhook(baseUrl: string, key: string, webhookUrl: string): Promise<string> {
  const clothes = { data: await uniqueImage(), filename: 'clothes.png', contentType: 'image/png' };
  const response = await postJob(baseUrl, key, { tool: 'fashion_card', clothes, webhook_url: webhookUrl });
  expect(response.status).toBe(202);
  return ((await response.json()) as { history_item_id: string }).history_item_id;
}

/** Creates a job whose request waits for its end (`Prefer: wait`), as the API's first waiter; returns its id. */
async function submitAndWait(baseUrl: string, key: string, webhookUrl: string): Promise<string> {
  const clothes = { data: await uniqueImage(), filename: 'clothes.png', contentType: 'image/png' };
  const fields = { tool: 'fashion_card', clothes, webhook_url: webhookUrl };
  const response = await postJob(baseUrl, key, fields, { Prefer: 'wait=30' });
  expect(response.status).toBe(200);
  const item = (await response.json()) as { history_item_id: string; status: string };
  expect(item.status).toBe('complete');
  return item.history_item_id;
}

describe('traces', () => {
  let world: WorkerWorld;
  let receiver: OtlpReceiver;
  let webhooks: Awaited<ReturnType<typeof startWebhookReceiver>>;

  beforeAll(async () => {
    world = await WorkerWorld.create(undefined, { queue: false });
    [receiver, webhooks] = await Promise.all([startOtlpReceiver(), startWebhookReceiver()]);
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
    await receiver?.close();
    await webhooks?.close();
  }, 60_000);

  describe('with an OTLP endpoint (http/json), an API process and a worker', () => {
    let api: RunningService;
    let worker: RunningService;
    let key: string;

    beforeAll(async () => {
      const tracing = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' };
      api = await world.processes.start('api', { ...tracing, ...QUICK_EXPORT, ...WEBHOOKS_ALLOWED });
      worker = await world.processes.start('worker', {
        ...tracing,
        ...QUICK_EXPORT,
        ...WEBHOOKS_ALLOWED,
        ...cogEngine(world.fake),
      });
      ({ key } = await createUser(world.env));
    }, 60_000);

    // The processes below share the queue: a traced worker left running would take their jobs.
    afterAll(async () => {
      await world.processes.stopAll();
    }, 60_000);

    it('exports one trace per job: the request, the queueing, the worker, the engine, storage, webhook, pg and Redis', async () => {
      const id = await submitAndWait(
        api.baseUrl,
        key,
        `${webhooks.url}/${WEBHOOK_PATH_SECRET}?token=${WEBHOOK_QUERY_SECRET}`,
      );
      const ofJob = () => receiver.spans.filter((span) => span.attributes['igs.item_id'] === id);
      await waitUntil(() => ofJob().some((span) => span.name === 'process webhooks'), 'the webhook delivery span');

      const traceIds = new Set(ofJob().map((span) => span.traceId));
      expect(traceIds.size).toBe(1);
      const [traceId] = traceIds;
      // Every span of the trace has been exported once the last one's parent chain is complete.
      const sut = () => receiver.spans.filter((span) => span.traceId === traceId);
      await waitUntil(() => sut().some((span) => span.kind === SPAN_KIND.server), 'the creating request span');
      const byService = (name: string) => sut().filter((span) => span.resource['service.name'] === name);

      // The creating request, in the API process: its HTTP span named after its route, the queueing, and its
      // database calls.
      const apiSpans = byService('igs-api');
      const request = apiSpans.find((span) => span.kind === SPAN_KIND.server);
      expect(request?.name).toBe('POST /generation/generate_image_v2');
      expect(request?.attributes).toMatchObject({
        'http.request.method': 'POST',
        'http.route': '/generation/generate_image_v2',
      });
      expect(apiSpans.map((span) => span.name)).toContain('send generation');
      expect(apiSpans.some((span) => span.attributes['db.system.name'] === 'postgresql')).toBe(true);
      expect(apiSpans.some((span) => span.attributes['db.system.name'] === 'redis')).toBe(true);
      // The request is the API process's first to wait: the Redis connection it opened to hear of the job's end
      // (shared by every later waiter) is no part of its trace.
      const apiRedis = apiSpans.filter((span) => span.attributes['db.system.name'] === 'redis');
      expect(apiRedis.map((span) => span.name)).not.toContain('connect');
      expect(apiRedis.map((span) => span.name)).not.toContain('subscribe');

      // The worker continues the same trace, under the queueing span.
      const workerSpans = byService('igs-worker');
      const send = apiSpans.find((span) => span.name === 'send generation')!;
      const processing = workerSpans.find((span) => span.name === 'process generation');
      expect(processing).toMatchObject({ kind: SPAN_KIND.consumer, parentSpanId: send.spanId });
      const engine = workerSpans.find((span) => span.name === 'engine generate');
      expect(engine?.attributes).toEqual(
        expect.objectContaining({
          'igs.tool': 'fashion_card',
          'igs.generation_type': expect.any(String),
          'igs.engine.kind': 'cog',
          'igs.outcome': 'complete',
        }),
      );
      // What the engine does in Redis (its run record, its slot) hangs under the engine span.
      const engineCalls = workerSpans.filter((span) => span.parentSpanId === engine?.spanId);
      expect(engineCalls.some((span) => span.attributes['db.system.name'] === 'redis')).toBe(true);
      // The turn on the model server is one span, whatever number of tries it took.
      const slotWait = engineCalls.filter((span) => span.name === 'wait for engine slot');
      expect(slotWait).toHaveLength(1);
      expect(workerSpans.filter((span) => span.parentSpanId === slotWait[0].spanId)).toEqual([]);
      // The call to the model server is a client span of the engine's, and carries the trace to the server.
      const modelCall = engineCalls.find(
        (span) => span.kind === SPAN_KIND.client && span.attributes['http.request.method'] === 'PUT',
      );
      expect(modelCall?.attributes['url.full']).toMatch(/\/predictions\/[^/]+$/);
      const prediction = world.fake.calls.find((call) => call.method === 'PUT' && call.path.endsWith(id));
      expect(prediction?.headers.traceparent).toBe(`00-${traceId}-${modelCall?.spanId}-01`);
      const names = workerSpans.map((span) => span.name);
      expect(names).toEqual(expect.arrayContaining(['store outputs', 'send webhooks', 'process webhooks']));
      // The webhook's POST names its receiver's origin, and no span the collector got carries the URL's secrets.
      const delivery = workerSpans.find((span) => span.name === 'process webhooks')!;
      const post = workerSpans.find(
        (span) => span.parentSpanId === delivery.spanId && span.attributes['http.request.method'] === 'POST',
      );
      expect(post?.attributes['url.full']).toBe(`${new URL(webhooks.url).origin}/`);
      const secrets = [WEBHOOK_PATH_SECRET, WEBHOOK_QUERY_SECRET];
      expect(receiver.requests.filter((r) => secrets.some((secret) => r.body.includes(secret))).length).toBe(0);
      const workerDatabase = workerSpans.filter((span) => span.attributes['db.system.name'] === 'postgresql');
      const workerRedis = workerSpans.filter((span) => span.attributes['db.system.name'] === 'redis');
      expect(workerDatabase.length).toBeGreaterThan(0);
      expect(workerRedis.length).toBeGreaterThan(0);
      // Redis spans name keys, not values: Bull's scripts, which take a job's data as arguments, included.
      const scripts = [...apiRedis, ...workerRedis].filter((span) => span.name === 'evalsha');
      expect(scripts.length).toBeGreaterThan(0);
      for (const script of scripts) expect(script.attributes['db.query.text']).not.toContain('historyItemId');
      // Database and Redis calls hang under the job's spans, never on their own.
      const spanIds = new Set(sut().map((span) => span.spanId));
      for (const call of [...workerDatabase, ...workerRedis]) expect(spanIds.has(call.parentSpanId!)).toBe(true);

      // The worker's log line about the job names the trace and the span it was written in.
      const completed = logLines(worker).find((line) => line.msg === 'job complete' && line.id === id);
      expect(completed).toMatchObject({ trace_id: traceId, span_id: processing?.spanId });

      // Traces only: the service's metrics are Prometheus's and its logs go to stdout.
      expect(receiver.refused).toEqual([]);
    });

    it('traces the requests that change something, named after their route, and no reads', async () => {
      const seen = receiver.spans.length;
      const id = await submit(api.baseUrl, key, await uniqueImage());
      expect((await final(api.baseUrl, key, id)).status).toBe('complete');
      expect((await getItem(api.baseUrl, key, id)).status).toBe(200);
      expect((await fetch(`${api.baseUrl}/no/such/path`, { method: 'POST', headers: bearer(key) })).status).toBe(404);
      const deletion = await fetch(`${api.baseUrl}/user/generation-history/${id}`, {
        method: 'DELETE',
        headers: bearer(key),
      });
      expect(deletion.status).toBe(204);

      // The API process exports its spans in the order they end: once the deletion's is in, every earlier one is.
      const served = () =>
        receiver.spans
          .slice(seen)
          .filter((span) => span.kind === SPAN_KIND.server && span.resource['service.name'] === 'igs-api');
      await waitUntil(() => served().some((span) => span.attributes['http.request.method'] === 'DELETE'), 'DELETE');
      expect(served().map((span) => [span.name, span.attributes['http.route']])).toEqual([
        ['POST /generation/generate_image_v2', '/generation/generate_image_v2'],
        // No route took it: the method alone, as OpenTelemetry's conventions ask.
        ['POST', undefined],
        ['DELETE /user/generation-history/:id', '/user/generation-history/:id'],
      ]);
    });
  });

  // A read taken by the instrumentation, though not traced, cost CPU for nothing (docs/performance.md, Tracing).
  it('leaves reads to Node as they are and gives the http instrumentation the requests it traces', async () => {
    expect(await requestsTheInstrumentationTakes(receiver.endpoint)).toEqual({
      GET: false,
      HEAD: false,
      POST: true,
      PUT: true,
      DELETE: true,
    });
  });

  describe('with STORAGE=s3', () => {
    it('traces no read, not the media file one streams from the bucket', async () => {
      const s3 = await startS3Server();
      try {
        const id = randomUUID();
        await s3.client.send(
          new PutObjectCommand({ Bucket: s3.bucket, Key: `media/${id}/stock.jpg`, Body: await uniqueImage() }),
        );
        const sut = await world.processes.start('api', {
          ...s3.serviceEnv,
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          ...QUICK_EXPORT,
        });
        // Served only while its item exists: a complete item of a user's, as a job would have left it.
        const { userId } = await createUser(world.env);
        await query(
          world.env,
          `INSERT INTO history_items (id, user_id, tool, generation_type, status, inputs, completed_at)
           VALUES ($1, $2, 'default', 'enhance', 'complete', '{}', now())`,
          [id, userId],
        );
        const seen = receiver.spans.length;
        const media = await fetch(`${sut.baseUrl}/${signedMediaPath(world.env.serviceEnv, id, 'stock.jpg')}`);
        expect(media.status).toBe(200);
        await media.arrayBuffer();
        // A traced request after it: once its span is in, any span of the read would be too.
        expect((await fetch(`${sut.baseUrl}/no/such/path`, { method: 'POST' })).status).toBe(404);
        await world.processes.stop(sut);

        const exported = receiver.spans.slice(seen);
        expect(exported.some((span) => span.kind === SPAN_KIND.server && span.name === 'POST')).toBe(true);
        expect(exported.filter((span) => span.kind !== SPAN_KIND.server)).toEqual([]);
      } finally {
        await s3.stop();
      }
    }, 60_000);
  });

  describe('with a worker stopped past SHUTDOWN_TIMEOUT_MS', () => {
    it('exports the stopped attempt: its engine span, ended stopped, before the process exits', async () => {
      world.fake.behave(() => ({ kind: 'succeed', delayMs: 60_000 }));
      try {
        const sut = await world.processes.start('all', {
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          SHUTDOWN_TIMEOUT_MS: '500',
          ...QUICK_EXPORT,
          ...cogEngine(world.fake),
        });
        const { key } = await createUser(world.env);
        const id = await submit(sut.baseUrl, key, await uniqueImage());
        await world.fake.waitFor((f) => f.inFlight().length === 1, 'the job to be in the engine');

        expect(await world.processes.stop(sut)).toBe(0);

        const attempt = receiver.spans.find(
          (span) => span.name === 'process generation' && span.attributes['igs.item_id'] === id,
        );
        const engine = receiver.spans.find(
          (span) => span.name === 'engine generate' && span.parentSpanId === attempt?.spanId,
        );
        expect(engine?.attributes['igs.outcome']).toBe('stopped');
      } finally {
        world.fake.behave(() => ({ kind: 'succeed' }));
      }
    }, 60_000);
  });

  describe('with OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf', () => {
    it('sends the job’s spans as protobuf', async () => {
      const protobuf = await startOtlpReceiver();
      try {
        const sut = await world.processes.start('all', {
          OTEL_EXPORTER_OTLP_ENDPOINT: protobuf.endpoint,
          OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
          ...QUICK_EXPORT,
          ...cogEngine(world.fake),
        });
        const { key } = await createUser(world.env);
        const id = await submit(sut.baseUrl, key, await uniqueImage());
        expect((await final(sut.baseUrl, key, id)).status).toBe('complete');
        // Attribute values are plain bytes in protobuf: the item id is in the body that carries its spans.
        await waitUntil(() => protobuf.requests.some((r) => r.body.includes(id)), 'the job’s spans');
        expect(new Set(protobuf.requests.map((r) => r.contentType))).toEqual(new Set(['application/x-protobuf']));
        await world.processes.stop(sut);
      } finally {
        await protobuf.close();
      }
    }, 60_000);
  });

  describe('with no endpoint set', () => {
    it('loads no OpenTelemetry SDK module and sends nothing, to the default port either', async () => {
      const modules = join(mkdtempSync(join(tmpdir(), 'otel-modules-')), 'loaded.txt');
      const defaultPort = await startOtlpReceiver(DEFAULT_OTLP_PORT).catch((error: unknown) => {
        throw new Error(`this test needs 127.0.0.1:${DEFAULT_OTLP_PORT} free, to listen as an exporter's default`, {
          cause: error,
        });
      });
      try {
        const sut = await world.processes.start('all', {
          NODE_OPTIONS: recordOpenTelemetryModules(modules),
          ...QUICK_EXPORT,
          ...WEBHOOKS_ALLOWED,
          ...cogEngine(world.fake),
        });
        const { key } = await createUser(world.env);
        const id = await submitWithWebhook(sut.baseUrl, key, webhooks.url);
        expect((await final(sut.baseUrl, key, id)).status).toBe('complete');
        // The process is stopped, so any batch it held would have been flushed by now.
        expect(await world.processes.stop(sut)).toBe(0);

        const loaded = existsSync(modules) ? readFileSync(modules, 'utf8').split('\n').filter(Boolean) : [];
        // The API alone (the no-op facade the service's spans go through) is all there is.
        expect(loaded.some((url) => url.includes('/@opentelemetry/api/'))).toBe(true);
        expect(loaded.filter((url) => !url.includes('/@opentelemetry/api/'))).toEqual([]);
        expect(logLines(sut).filter((line) => 'trace_id' in line)).toEqual([]);
        expect(defaultPort.requests.map((r) => r.contentType)).toEqual([]);
        expect(receiver.requests.filter((r) => r.body.includes(id)).map((r) => r.contentType)).toEqual([]);
      } finally {
        await defaultPort.close();
      }
    }, 60_000);
  });
});
