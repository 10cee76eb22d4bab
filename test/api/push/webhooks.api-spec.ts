import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { bearer, Client, type HistoryItemBody, postJob } from '../../support/client.js';
import { expectMatchesContract } from '../../support/contract.js';
import { createUser, query, uniqueImage, waitUntil, WorkerWorld } from '../../support/harness.js';
import { unsigned } from '../../support/media.js';
import type { RunningService } from '../../support/service.js';

/** One POST the receiver got. */
interface Received {
  headers: IncomingMessage['headers'];
  body: string;
}

/** A webhook receiver on loopback that answers each delivery with the next status of `answers` (then 200). */
async function startReceiver(): Promise<{
  url: string;
  received: Received[];
  answers: number[];
  redirectHits: number;
  close(): Promise<void>;
}> {
  const state = { received: [] as Received[], answers: [] as number[], redirectHits: 0 };
  const server: Server = createServer((request: IncomingMessage, response: ServerResponse) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => {
      if (request.url === '/moved-here') {
        state.redirectHits++;
        response.writeHead(200).end();
        return;
      }
      state.received.push({ headers: request.headers, body });
      const status = state.answers.shift() ?? 200;
      if (status === 302) response.writeHead(302, { Location: '/moved-here' }).end();
      else response.writeHead(status).end();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    get received() {
      return state.received;
    },
    answers: state.answers,
    get redirectHits() {
      return state.redirectHits;
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** The item, read as its owner. */
async function itemOf(api: RunningService, key: string, id: string): Promise<HistoryItemBody> {
  return (await new Client(api.baseUrl, key).get(id)).body;
}

describe('webhooks', () => {
  let world: WorkerWorld;
  let api: RunningService;
  let allowingWorker: RunningService;
  let user: { key: string; userId: string };
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  /** Short retries, plain http and loopback receivers: the test's own allowances, named here. */
  const allowances = {
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    WEBHOOK_RETRY_DELAYS_MS: '200,200,200',
  };

  beforeAll(async () => {
    world = await WorkerWorld.create();
    [api, allowingWorker] = await Promise.all([
      world.processes.start('api', allowances),
      world.processes.start('worker', allowances),
    ]);
    user = await createUser(world.env);
    receiver = await startReceiver();
  }, 60_000);

  afterAll(async () => {
    await receiver?.close();
    await world?.dispose();
  }, 60_000);

  async function secret(): Promise<string> {
    return (await new Client(api.baseUrl, user.key).webhookSecret()).body.secret;
  }

  async function jobWithWebhook(url = receiver.url): Promise<string> {
    const clothes = { data: await uniqueImage(), filename: 'clothes.png', contentType: 'image/png' };
    const response = await postJob(api.baseUrl, user.key, { tool: 'fashion_card', clothes, webhook_url: url });
    expect(response.status).toBe(202);
    return ((await response.json()) as { history_item_id: string }).history_item_id;
  }

  it('delivers the final item once, signed so that standardwebhooks verifies it, and shows it on the item', async () => {
    const before = receiver.received.length;
    const id = await jobWithWebhook();
    await waitUntil(() => receiver.received.length > before, 'the delivery');
    await waitUntil(async () => (await itemOf(api, user.key, id)).webhook?.state === 'delivered', 'delivered state');

    const [delivery] = receiver.received.slice(before);
    const event = new Webhook(await secret()).verify(delivery.body, delivery.headers as Record<string, string>) as {
      type: string;
      data: HistoryItemBody;
    };
    const item = await itemOf(api, user.key, id);
    expect(event.type).toBe('generation.completed');
    expect(event.data).toMatchObject({ history_item_id: id, status: 'complete' });
    expect(unsigned(event.data.stock_url!)).toBe(unsigned(item.stock_url!));
    // Signed: the receiver downloads the result with no key.
    const result = await fetch(`${api.baseUrl}/${event.data.stock_url}`);
    expect(result.status).toBe(200);
    expect(result.headers.get('content-type')).toBe('image/jpeg');
    await result.arrayBuffer();
    expect(delivery.headers['webhook-id']).toBe(`msg_${id}`);
    expect(item.webhook).toMatchObject({ url: receiver.url, state: 'delivered', attempts: 1, last_status: 200 });
    expect(receiver.received.slice(before)).toHaveLength(1);
  }, 30_000);

  it('retries a failing receiver with the same webhook-id, and a 410 stops it', async () => {
    const before = receiver.received.length;
    receiver.answers.push(500, 503, 410);
    const id = await jobWithWebhook();
    await waitUntil(async () => (await itemOf(api, user.key, id)).webhook?.state === 'failed', 'the failed state');
    await new Promise((resolve) => setTimeout(resolve, 1000));

    const attempts = receiver.received.slice(before);
    expect(attempts.map((attempt) => attempt.headers['webhook-id'])).toEqual([`msg_${id}`, `msg_${id}`, `msg_${id}`]);
    expect((await itemOf(api, user.key, id)).webhook).toMatchObject({ state: 'failed', attempts: 3, last_status: 410 });
  }, 30_000);

  it('does not follow a redirect: the attempt counts as failed and is retried', async () => {
    const before = receiver.received.length;
    receiver.answers.push(302);
    const id = await jobWithWebhook();
    await waitUntil(async () => (await itemOf(api, user.key, id)).webhook?.state === 'delivered', 'delivered state');

    expect(receiver.redirectHits).toBe(0);
    expect(receiver.received.slice(before)).toHaveLength(2);
    expect((await itemOf(api, user.key, id)).webhook).toMatchObject({ attempts: 2, last_status: 200 });
  }, 30_000);

  it('signs with both secrets for a while after a rotation, so a receiver on either verifies', async () => {
    const old = await secret();
    const fresh = (await new Client(api.baseUrl, user.key).rotateWebhookSecret()).body.secret;
    expect(fresh).not.toBe(old);
    expect(await secret()).toBe(fresh);
    const before = receiver.received.length;

    await jobWithWebhook();
    await waitUntil(() => receiver.received.length > before, 'the delivery');

    const [delivery] = receiver.received.slice(before);
    for (const key of [old, fresh]) {
      expect(() => new Webhook(key).verify(delivery.body, delivery.headers as Record<string, string>)).not.toThrow();
    }
  }, 30_000);

  it('loses no delivery when the worker is killed between attempts: another worker delivers it', async () => {
    await world.processes.stop(allowingWorker);
    // Long enough a wait between attempts for the worker to be killed during it.
    const slow = { ...allowances, WEBHOOK_RETRY_DELAYS_MS: '3000' };
    let worker = await world.processes.start('worker', slow);
    const before = receiver.received.length;
    receiver.answers.push(500);
    const id = await jobWithWebhook();
    await waitUntil(() => receiver.received.length > before, 'the first attempt');

    await worker.stop('SIGKILL');
    worker = await world.processes.start('worker', slow);
    await waitUntil(async () => (await itemOf(api, user.key, id)).webhook?.state === 'delivered', 'delivered state');

    const attempts = receiver.received.slice(before);
    expect(attempts.map((attempt) => attempt.headers['webhook-id'])).toEqual([`msg_${id}`, `msg_${id}`]);
    // Each attempt signs the media URLs afresh (3 s apart here): a retry hours later still carries working ones.
    const expiresOf = (attempt: { body: string }) => {
      const { data } = JSON.parse(attempt.body) as { data: HistoryItemBody };
      return Number(new URL(data.stock_url!, 'http://localhost/').searchParams.get('expires'));
    };
    expect(expiresOf(attempts[1])).toBeGreaterThan(expiresOf(attempts[0]));
    await world.processes.stop(worker);
    allowingWorker = await world.processes.start('worker', allowances);
  }, 60_000);

  it('queues again a message the process that ended the job did not get to queue (the item is the outbox)', async () => {
    const before = receiver.received.length;
    // What a process killed between committing an item's end and queueing its message leaves behind.
    const [{ id }] = await query<{ id: string }>(
      world.env,
      `INSERT INTO history_items (id, user_id, tool, generation_type, status, inputs, error_code, error_message,
                                  completed_at, webhook_url, webhook_state)
       VALUES (gen_random_uuid(), $1, 'fashion_card', 'product_card', 'error', '{}', 'engine_failed', 'lost',
               now() - interval '1 minute', $2, 'pending')
       RETURNING id`,
      [user.userId, receiver.url],
    );

    await waitUntil(() => receiver.received.length > before, 'the reconciler to queue the message again', 15_000);

    const delivery = receiver.received[before];
    expect(delivery.headers['webhook-id']).toBe(`msg_${id}`);
    expect(JSON.parse(delivery.body)).toMatchObject({ type: 'generation.failed', data: { history_item_id: id } });
  }, 30_000);

  describe('without the development allowances', () => {
    let strictApi: RunningService;

    beforeAll(async () => {
      // Only strict processes from here on: what they refuse is not delivered by a lenient one behind their back.
      await world.processes.stop(allowingWorker);
      const strict = { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_RETRY_DELAYS_MS: '200' };
      [strictApi] = await Promise.all([world.processes.start('api', strict), world.processes.start('worker', strict)]);
    }, 60_000);

    it.each([
      'http://127.0.0.1:9/hooks',
      'http://localhost:9/hooks',
      'http://localhost.:9/hooks',
      'http://[::1]/hooks',
      'ftp://example.com/x',
    ])('refuses webhook_url %s at creation with 422 invalid_webhook_url', async (url) => {
      const clothes = { data: await uniqueImage(), filename: 'clothes.png', contentType: 'image/png' };
      const response = await postJob(strictApi.baseUrl, user.key, {
        tool: 'fashion_card',
        clothes,
        webhook_url: url,
      });

      expect(response.status).toBe(422);
      const problem = await expectMatchesContract(response, 'POST', '/generation/generate_image_v2/');
      expect(problem).toMatchObject({ code: 'invalid_webhook_url', errors: [{ field: 'webhook_url' }] });
    });

    it('keeps a webhook_url with an international host name in its ASCII form, as a URI must be', async () => {
      const clothes = { data: await uniqueImage(), filename: 'clothes.png', contentType: 'image/png' };
      const response = await postJob(strictApi.baseUrl, user.key, {
        tool: 'fashion_card',
        clothes,
        webhook_url: 'https://例え.jp/hooks/générées',
      });
      expect(response.status).toBe(202);
      const { history_item_id: id } = (await response.json()) as { history_item_id: string };

      const item = await fetch(`${strictApi.baseUrl}/user/generation-history/${id}`, { headers: bearer(user.key) });

      const body = (await expectMatchesContract(item, 'GET', '/user/generation-history/{id}')) as {
        webhook: { url: string };
      };
      expect(body.webhook.url).toBe('https://xn--r8jz45g.jp/hooks/g%C3%A9n%C3%A9r%C3%A9es');
    });

    it('refuses at delivery a host name that resolves to a loopback address, and never connects to it', async () => {
      const before = receiver.received.length;
      // Accepted by the lenient API (which allows private networks), delivered by the strict worker, which resolves
      // `localhost` and refuses the address it would connect to.
      const id = await jobWithWebhook(receiver.url.replace('127.0.0.1', 'localhost'));
      await waitUntil(async () => (await itemOf(api, user.key, id)).webhook?.state === 'failed', 'the failed state');

      expect(receiver.received.length).toBe(before);
      expect((await itemOf(api, user.key, id)).webhook).toMatchObject({
        state: 'failed',
        attempts: 1,
        last_status: null,
      });
    }, 30_000);
  });
});
