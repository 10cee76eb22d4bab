import { readFile } from 'node:fs/promises';
import { Webhook } from 'standardwebhooks';
import { type Client, type HistoryItem, ServiceError, createClient } from '../../../client/src/index.js';
import { verifyWebhook } from '../../../client/src/webhooks.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { Processes, waitUntil } from '../../support/harness.js';
import { ImageServer } from '../../support/image-server.js';
import { type RunningMock, startMock } from '../../support/mock.js';
import { type ScriptedEvents, startScriptedEvents } from '../../support/scripted-events.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { unsignedItem } from '../../support/media.js';

const example = (path: string) => readFile(`docs/examples/${path}`);

/** What the client's own callers see: every method against the running service, errors typed. */
describe('the typed client against the service', () => {
  let env: TestEnvironment;
  let service: RunningService;
  /** API only, with a database and queue of its own that no worker serves: its jobs stay pending. */
  let apiOnlyEnv: TestEnvironment;
  let apiOnly: RunningService;
  let client: Client;
  let key: string;

  beforeAll(async () => {
    [env, apiOnlyEnv] = await Promise.all([createTestEnvironment(), createTestEnvironment()]);
    [service, apiOnly] = await Promise.all([
      // A loopback image server stands for the web the service fetches URL inputs from.
      startService({ ...env.serviceEnv, WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' }),
      startService({ ...apiOnlyEnv.serviceEnv, ROLE: 'api', LIMIT_CREATIONS_PER_MINUTE: '3' }),
    ]);
    key = await createUserWithKey(env.databaseUrl);
    client = createClient({ baseUrl: service.baseUrl, apiKey: key });
  }, 60_000);

  afterAll(async () => {
    await Promise.all([service?.stop(), apiOnly?.stop()]);
    await Promise.all([env?.dispose(), apiOnlyEnv?.dispose()]);
  }, 60_000);

  const tryOn = async () => ({
    tool: 'fashion_swap_half',
    generationType: 'upper',
    images: {
      clothes: await example('fashion_swap_half-upper/input-clothes.jpg'),
      // A browser File (a Blob) and a Node Buffer side by side.
      person: new Blob([await example('fashion_swap_half-upper/input-person.jpg')], { type: 'image/jpeg' }),
    },
  });

  it('lists the tools and a tool generation types with their inputs', async () => {
    const tools = await client.tools();
    const types = await client.generationTypes('fashion_swap_half');

    expect(tools.map((tool) => tool.tool)).toContain('fashion_swap_half');
    expect(types.map((type) => type.generation_type)).toEqual(['upper', 'lower']);
    expect(types[0].inputs.map((input) => input.name)).toEqual(['clothes', 'person']);
  });

  it('creates a job from named images, follows it to complete, and serves its result', async () => {
    const accepted = await client.createJob(await tryOn());
    const updates: HistoryItem[] = [];

    const item = await client.waitForJob(accepted.history_item_id, { onUpdate: (update) => updates.push(update) });

    expect(item).toMatchObject({ history_item_id: accepted.history_item_id, status: 'complete', progress: 1 });
    expect(updates.at(-1)).toEqual(item);
    const reported = updates.flatMap((update) => (update.progress === null ? [] : [update.progress]));
    expect(reported).toEqual([...reported].sort((a, b) => a - b));
    const stock = await fetch(client.mediaUrl(item.stock_url!));
    expect([stock.status, stock.headers.get('content-type')]).toEqual([200, 'image/jpeg']);
    // The same item, its media URLs signed afresh by the read.
    expect(unsignedItem(await client.item(item.history_item_id))).toEqual(unsignedItem(item));
  }, 60_000);

  it('creates a job from a stored file and an image URL, and stores, reads and deletes files', async () => {
    const images = await ImageServer.start();
    try {
      const clothes = await example('fashion_swap_half-upper/input-clothes.jpg');
      images.route('/clothes.jpg', { kind: 'bytes', data: clothes, contentType: 'image/jpeg' });
      const person = await client.uploadFile(await example('fashion_swap_half-upper/input-person.jpg'));

      const accepted = await client.createJob({
        tool: 'fashion_swap_half',
        generationType: 'upper',
        images: { clothes: images.url('/clothes.jpg'), person: person.file_id },
      });
      const item = await client.waitForJob(accepted.history_item_id);

      expect(item.status).toBe('complete');
      expect(await client.getFile(person.file_id)).toEqual(person);
      await client.deleteFile(person.file_id);
      const gone = await client.getFile(person.file_id).catch((error: unknown) => error);
      expect(gone).toBeInstanceOf(ServiceError);
      expect(gone).toMatchObject({ status: 404, code: 'not_found' });
      await expect(
        client.createJob({
          tool: 'default',
          images: { image: 'https://images.example.com/a.jpg' },
          prompt: 7 as never,
        }),
      ).rejects.toMatchObject({ status: 400, code: 'validation_failed' });
      await expect(
        client.createJob({ tool: 'fashion_swap', images: { clothes: person.file_id, person: Buffer.from('x') } }),
      ).rejects.toThrow(TypeError);
    } finally {
      await images.stop();
    }
  }, 60_000);

  it("reads where a job was (its start and metrics) and the caller's usage, which counts it", async () => {
    const before = await client.usage();
    const { history_item_id: id } = await client.createJob({ ...(await tryOn()), wait: 30 });

    const item = await client.item(id);
    const after = await client.usage();

    expect(item).toMatchObject({ status: 'complete', queue_position: null });
    expect(item.started_at).not.toBeNull();
    expect(item.metrics).toEqual({ queue_seconds: expect.any(Number), run_seconds: expect.any(Number) });
    expect(after.month.jobs).toBe(before.month.jobs + 1);
    expect(after.month.by_tool.fashion_swap_half?.complete).toBe(
      (before.month.by_tool.fashion_swap_half?.complete ?? 0) + 1,
    );
    expect(after.limits.creations_per_minute).toBeGreaterThan(0);
  }, 60_000);

  it('sends webhook_events as a repeated field, and the service refuses an unknown one by name', async () => {
    const refused = client.createJob({
      ...(await tryOn()),
      webhookUrl: 'https://hooks.example.com/igs',
      webhookEvents: ['started', 'finished' as 'completed'],
    });

    await expect(refused).rejects.toMatchObject({
      status: 422,
      code: 'invalid_webhook_events',
      problem: { errors: [expect.objectContaining({ field: 'webhook_events' })] },
    });
  }, 60_000);

  it('waits by Prefer: wait when no event stream can be had', async () => {
    const noStreams: typeof fetch = (input, init) => {
      const url = input instanceof Request ? input.url : String(input);
      return url.endsWith('/events') ? Promise.reject(new TypeError('stream blocked')) : fetch(input, init);
    };
    const waiting = createClient({ baseUrl: service.baseUrl, apiKey: key, fetch: noStreams });
    const accepted = await waiting.createJob(await tryOn());

    const item = await waiting.waitForJob(accepted.history_item_id);

    expect(item.status).toBe('complete');
  }, 60_000);

  it('answers the finished job at once with wait, and the first job again for a repeated idempotency key', async () => {
    const job = { ...(await tryOn()), idempotencyKey: `client-${Date.now()}`, wait: 30 };

    const first = await client.createJob(job);
    const again = await client.createJob(job);

    expect(first.status).toBe('complete');
    expect(again.history_item_id).toBe(first.history_item_id);
  }, 60_000);

  it("sends a seed, reads it back on the item's outputs, and hears unsupported_option for more results than the engine makes", async () => {
    const { history_item_id: id } = await client.createJob({ ...(await tryOn()), seed: 31337, wait: 30 });
    const tooMany = await client.createJob({ ...(await tryOn()), numOutputs: 2 }).catch((error: unknown) => error);

    const item = await client.item(id);
    expect(item.outputs).toEqual([
      { preview_url: item.preview_url, stock_url: item.stock_url, output_url: item.output_url, seed: 31337 },
    ]);
    expect(tooMany).toMatchObject({ name: 'ServiceError', status: 422, code: 'unsupported_option' });
    expect((tooMany as ServiceError).problem?.errors?.map((field) => field.field)).toEqual(['num_outputs']);
  }, 60_000);

  it('likes an item, finds it in the history pages, and deletes it', async () => {
    const { history_item_id: id } = await client.createJob({ ...(await tryOn()), wait: 30 });

    expect((await client.like(id, true)).like).toBe(true);
    const page = await client.history({ status: 'complete', limit: 1 });
    expect(page).toMatchObject({ page: 1, limit: 1 });
    const all: string[] = [];
    for await (const item of client.historyItems({ status: 'complete', limit: 1 })) all.push(item.history_item_id);
    expect(all).toContain(id);
    expect(all).toHaveLength(page.total);

    await client.delete(id);

    const gone = await client.item(id).catch((error: unknown) => error);
    expect(gone).toBeInstanceOf(ServiceError);
    expect(gone).toMatchObject({ status: 404, code: 'not_found' });
  }, 60_000);

  it('cancels a pending job; waiting on it stops when the signal is aborted', async () => {
    const pending = createClient({
      baseUrl: apiOnly.baseUrl,
      apiKey: await createUserWithKey(apiOnlyEnv.databaseUrl),
    });
    const { history_item_id: id } = await pending.createJob(await tryOn());
    const abort = new AbortController();
    setTimeout(() => abort.abort(new Error('gave up')), 300);

    const waited = await pending.waitForJob(id, { signal: abort.signal }).catch((error: unknown) => error);
    const canceled = await pending.cancel(id);
    const again = await pending.cancel(id).catch((error: unknown) => error);

    expect(waited).toEqual(new Error('gave up'));
    expect(canceled).toMatchObject({ status: 'error', error: { code: 'canceled' } });
    expect(again).toMatchObject({ status: 409, code: 'not_pending' });
  }, 60_000);

  it('throws one typed error carrying the problem code, status and Retry-After', async () => {
    const stranger = createClient({ baseUrl: service.baseUrl, apiKey: 'igs_not_a_real_key' });
    // A user of their own: the creation limit counts per user across the service's processes.
    const limited = createClient({
      baseUrl: apiOnly.baseUrl,
      apiKey: await createUserWithKey(apiOnlyEnv.databaseUrl),
    });

    const unauthorized = await stranger.tools().catch((error: unknown) => error);
    const missingInput = await client
      .createJob({ tool: 'fashion_swap_half', images: { clothes: new Uint8Array([1, 2, 3]) } })
      .catch((error: unknown) => error);
    let rateLimited: unknown;
    for (let i = 0; i < 5 && !rateLimited; i++) {
      rateLimited = await limited
        .createJob({ tool: 'default', images: { image: await example('default/input-image.jpg') } })
        .then(
          () => undefined,
          (error: unknown) => error,
        );
    }
    const unreachable = await createClient({ baseUrl: 'http://127.0.0.1:9', apiKey: key })
      .tools()
      .catch((error: unknown) => error);

    expect(unauthorized).toMatchObject({ name: 'ServiceError', status: 401, code: 'unauthorized' });
    expect(missingInput).toMatchObject({ status: 400 });
    expect((missingInput as ServiceError).problem?.errors?.map((field) => field.field)).toContain('person');
    expect(rateLimited).toMatchObject({ status: 429, code: 'rate_limited' });
    expect((rateLimited as ServiceError).retryAfter).toBeGreaterThan(0);
    expect(unreachable).toMatchObject({ status: 0, code: 'network_error' });
  }, 60_000);

  it('verifies a signed webhook delivery and refuses a tampered one', async () => {
    const secret = `whsec_${Buffer.from('a secret of at least twenty-four bytes').toString('base64')}`;
    const item = await client.item((await client.createJob({ ...(await tryOn()), wait: 30 })).history_item_id);
    const body = JSON.stringify({ type: 'generation.completed', timestamp: item.completed_at, data: item });
    const id = 'msg_1';
    const now = new Date();
    const headers = {
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': new Webhook(secret).sign(id, now, body),
    };

    expect(verifyWebhook(secret, body, new Headers(headers)).data).toEqual(item);
    expect(() => verifyWebhook(secret, body.replace('complete', 'error'), headers)).toThrow();
  }, 60_000);
});

/**
 * A job waited on while its API process is stopped and started again, as a one-replica rollout does it: the process
 * gets SIGTERM (its streams end with `event: reconnect`) and a new one listens on the same port a moment later.
 */
describe('the typed client across a restart of the API', () => {
  let env: TestEnvironment;
  let processes: Processes;
  /** Stops the history follower even when the test fails first: it would retry, and keep Jest running, for good. */
  const following = new AbortController();

  beforeAll(async () => {
    env = await createTestEnvironment();
    processes = new Processes(env);
  }, 60_000);

  afterAll(async () => {
    following.abort();
    await processes?.stopAll();
    await env?.dispose();
  }, 60_000);

  it('waits while the API is gone and answers the complete item once it is back and a worker runs the job', async () => {
    const first = await processes.start('api');
    const port = new URL(first.baseUrl).port;
    const apiKey = await createUserWithKey(env.databaseUrl);
    let unreachable = 0;
    const counting: typeof fetch = (input, init) =>
      fetch(input, init).catch((error: unknown) => {
        unreachable++;
        throw error;
      });
    const sut = createClient({ baseUrl: first.baseUrl, apiKey, fetch: counting });
    // A history page: what it shows of each item, listed afresh each time its stream opens, then kept up to date.
    const page = createClient({ baseUrl: first.baseUrl, apiKey });
    const shown = new Map<string, HistoryItem>();
    let opened = 0;
    const history = page
      .followHistory({
        signal: following.signal,
        onOpen: async () => {
          opened++;
          for (const item of (await page.history()).items) shown.set(item.history_item_id, item);
        },
        onItem: (item) => shown.set(item.history_item_id, item),
      })
      .catch((error: unknown) => error);
    await waitUntil(() => opened === 1, 'the history stream to open');
    const { history_item_id: id } = await sut.createJob({
      tool: 'default',
      images: { image: await example('default/input-image.jpg') },
    });
    const updates: HistoryItem[] = [];
    const waiting = sut.waitForJob(id, { onUpdate: (item) => updates.push(item) }).catch((error: unknown) => error);
    await waitUntil(() => updates.length === 1, 'the client to follow the pending job');

    expect(await processes.stop(first)).toBe(0);
    await waitUntil(() => unreachable >= 2, 'the client to find the API gone, twice');
    await processes.start('api', { PORT: port });
    await processes.start('worker');

    const final = await waiting;
    expect(final).toMatchObject({ history_item_id: id, status: 'complete' });
    expect([...new Set(updates.map((item) => item.status))]).toEqual(['pending', 'complete']);
    expect(updates.at(-1)).toEqual(final);
    await waitUntil(() => shown.get(id)?.status === 'complete', 'the history page to show it complete');
    // Read at another moment, so signed for another: the same item, its URLs signed afresh.
    expect(unsignedItem(shown.get(id)!)).toEqual(unsignedItem(final as HistoryItem));
    expect(opened).toBe(2);
    following.abort();
    expect(await history).toMatchObject({ name: 'AbortError' });
  }, 60_000);
});

/** The same client against `npm run mock`, as a frontend team uses it before the service exists. */
describe('the typed client against the mock', () => {
  let mock: RunningMock;
  let client: Client;

  beforeAll(async () => {
    mock = await startMock();
    client = createClient({ baseUrl: mock.baseUrl, apiKey: 'any-key' });
  }, 60_000);

  afterAll(() => mock?.stop());

  it('runs the whole flow on the contract examples, and the result is a real image', async () => {
    const tools = await client.tools();
    const accepted = await client.createJob({
      tool: 'fashion_swap',
      images: { clothes: new Uint8Array([0xff, 0xd8, 0xff]), person: new Uint8Array([0xff, 0xd8, 0xff]) },
    });
    const item = await client.waitForJob(accepted.history_item_id);
    const page = await client.history();

    expect(tools).toHaveLength(7);
    expect(item.status).toBe('complete');
    expect(page.items.length).toBeGreaterThan(0);
    const stock = await fetch(client.mediaUrl(item.stock_url!));
    expect(stock.headers.get('content-type')).toBe('image/jpeg');
    expect((await stock.arrayBuffer()).byteLength).toBeGreaterThan(10_000);
  }, 60_000);
});

/**
 * What `onUpdate` hands a caller while a job runs, from a stream that sends the item again each time its progress
 * moves, as the contract describes it (the service's own engines report progress in their own tests).
 */
describe('the typed client following the progress of a job', () => {
  const id = '3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44';
  const signed = 'expires=1748782814&signature=Xq3Vb0yT8n0cJz4Kx1mWq7rS2dL9fH6aE5pG0uN3kYw';
  const pending = (progress: number | null): HistoryItem => ({
    history_item_id: id,
    tool: 'fashion_swap',
    generation_type: 'fashion_swap_full',
    status: 'pending',
    preview_url: null,
    stock_url: null,
    output_url: null,
    like: null,
    error: null,
    created_at: '2025-06-01T12:00:00.000Z',
    updated_at: '2025-06-01T12:00:00.000Z',
    completed_at: null,
    progress,
    expires_at: null,
    media_urls_expire_at: null,
    outputs: null,
    webhook: null,
    started_at: progress === null ? null : '2025-06-01T12:00:01.000Z',
    queue_position: null,
    metrics: null,
  });
  const complete: HistoryItem = {
    ...pending(1),
    status: 'complete',
    preview_url: `media/${id}/preview.webp?${signed}`,
    stock_url: `media/${id}/stock.jpg?${signed}`,
    output_url: `http://localhost:3000/media/${id}/stock.jpg?${signed}`,
    media_urls_expire_at: '2025-06-01T13:00:14.000Z',
    updated_at: '2025-06-01T12:00:14.512Z',
    completed_at: '2025-06-01T12:00:14.512Z',
  };
  /**
   * What the item's own URL answers next, for a client that no longer has its stream: the item, or a failure as a
   * proxy or the service answers it.
   */
  let answers: ({ item: HistoryItem; held: boolean } | { status: number; retryAfter?: number })[] = [];
  let server: ScriptedEvents;
  let sut: Client;

  beforeAll(async () => {
    server = await startScriptedEvents((request, response) => {
      const answer = request.url === `/user/generation-history/${id}` ? answers.shift() : undefined;
      if (!answer) return void response.writeHead(404).end();
      if ('status' in answer) {
        const retryAfter = answer.retryAfter === undefined ? {} : { 'Retry-After': String(answer.retryAfter) };
        return void response.writeHead(answer.status, retryAfter).end();
      }
      response
        .writeHead(200, {
          'Content-Type': 'application/json',
          ...(answer.held ? { 'Preference-Applied': 'wait=60' } : {}),
        })
        .end(JSON.stringify(answer.item));
    });
    sut = createClient({ baseUrl: server.baseUrl, apiKey: 'any-key' });
  });

  afterAll(() => server?.stop());

  it('calls onUpdate with each progress the stream sends, as it comes, rising to 1 at complete', async () => {
    const progress: (number | null)[] = [];
    const waiting = sut.waitForJob(id, { onUpdate: (item) => progress.push(item.progress) });
    const stream = await server.nextStream();

    for (const [index, item] of [pending(null), pending(0.25), pending(0.6), complete].entries()) {
      stream.send(item);
      await waitUntil(() => progress.length > index, `update ${index + 1}`);
    }
    stream.end();

    expect(await waiting).toEqual(complete);
    expect(progress).toEqual([null, 0.25, 0.6, 1]);
  });

  it('opens the stream again when it ends with a reconnect event, and goes on from the item as it is then', async () => {
    const progress: (number | null)[] = [];
    const waiting = sut.waitForJob(id, { onUpdate: (item) => progress.push(item.progress) });
    const leaving = await server.nextStream();
    leaving.send(pending(0.2));
    leaving.reconnect(10);

    const next = await server.nextStream();
    next.send(pending(0.7));
    next.send(complete);

    expect(await waiting).toEqual(complete);
    expect([leaving.id, next.id]).toEqual([id, id]);
    expect(progress).toEqual([0.2, 0.7, 1]);
  });

  it('takes the progress from each answer once the stream is cut, and passes on only what changed', async () => {
    answers = [
      { item: pending(0.5), held: false },
      { item: complete, held: true },
    ];
    const progress: (number | null)[] = [];
    const waiting = sut.waitForJob(id, { onUpdate: (item) => progress.push(item.progress) });
    const stream = await server.nextStream();

    stream.send(pending(0.2));
    stream.send(pending(0.5));
    stream.end();

    expect(await waiting).toEqual(complete);
    expect(progress).toEqual([0.2, 0.5, 1]);
    expect(answers).toEqual([]);
  });

  it('waits out a 503 and a 429 (for its Retry-After) while it polls, and rejects at once on a refusal', async () => {
    answers = [{ status: 503 }, { status: 429, retryAfter: 1 }, { item: complete, held: true }];
    const waiting = sut.waitForJob(id);
    (await server.nextStream()).end();

    expect(await waiting).toEqual(complete);
    expect(answers).toEqual([]);

    const refused = sut.waitForJob(id).catch((error: unknown) => error);
    (await server.nextStream()).end();

    expect(await refused).toMatchObject({ name: 'ServiceError', status: 404 });
  });
});
