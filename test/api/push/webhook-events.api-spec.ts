import { once } from 'node:events';
import { writeFile } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { Client, CREATE_PATH, type ProblemBody, type WebhookEventBody } from '../../support/client.js';
import { expectMatchesContract, expectMatchesSchema } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { type FakeReplicate, REAL_ESRGAN, startFakeReplicate } from '../../support/fake-replicate.js';
import { createUser, Processes, waitUntil } from '../../support/harness.js';
import { makeImage } from '../../support/jobs.js';
import type { RunningService } from '../../support/service.js';

/** A message the receiver got, verified with the user's secret. */
interface Message {
  id: string;
  event: WebhookEventBody;
}

/**
 * `webhook_events`: a job's start and progress sent as webhook messages of their own beside its final state, on a
 * model (the fake Replicate) that reports its progress as it runs.
 */
describe('webhook events', () => {
  let env: TestEnvironment;
  let processes: Processes;
  let fake: FakeReplicate;
  let service: RunningService;
  let client: Client;
  const received: { headers: IncomingHttpHeaders; body: string }[] = [];
  const receiver = createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => {
      received.push({ headers: request.headers, body });
      response.writeHead(204).end();
    });
  });
  let receiverUrl: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    fake = await startFakeReplicate();
    receiver.listen(0, '127.0.0.1');
    await once(receiver, 'listening');
    receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`;
    const file = join(env.dataDir, 'engines.yaml');
    await writeFile(
      file,
      JSON.stringify({
        engines: { replicate: { kind: 'replicate', token: fake.token, base_url: fake.url, concurrency: 2 } },
        routes: {
          default: {
            engine: 'replicate',
            model: REAL_ESRGAN.name,
            version: REAL_ESRGAN.version,
            inputs: { image: 'image' },
          },
        },
      }),
    );
    processes = new Processes(env);
    service = await processes.start('all', {
      ENGINES_FILE: file,
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    });
    client = new Client(service.baseUrl, (await createUser(env)).key);
  }, 120_000);

  afterAll(async () => {
    await processes?.stopAll();
    await fake?.close();
    await new Promise((resolve) => receiver.close(resolve));
    await env?.dispose();
  }, 60_000);

  async function image() {
    return { data: await makeImage(320, 240), filename: 'photo.png', contentType: 'image/png' };
  }

  /** The messages received for the item, verified as a receiver verifies them, in the order they came. */
  async function messagesOf(id: string): Promise<Message[]> {
    const secret = (await client.webhookSecret()).body.secret;
    return received
      .map(({ headers, body }) => ({
        id: String(headers['webhook-id']),
        event: new Webhook(secret).verify(body, headers as Record<string, string>) as WebhookEventBody,
      }))
      .filter((message) => message.event.data.history_item_id === id);
  }

  it('sends the start, the progress and the end, each a message with its own id, signed alike', async () => {
    fake.run({ kind: 'succeed', steps: 4, stepMs: 700 });
    const response = await client.postJob([
      ['tool', 'default'],
      ['image', await image()],
      ['webhook_url', receiverUrl],
      ['webhook_events', 'started'],
      ['webhook_events', 'progress'],
    ]);
    expect(response.status).toBe(202);
    const { history_item_id: id } = (await response.json()) as { history_item_id: string };

    await waitUntil(
      async () => (await messagesOf(id)).some((message) => message.event.type === 'generation.completed'),
      'the final message',
      30_000,
    );
    const messages = await messagesOf(id);
    for (const { event } of messages) expectMatchesSchema('WebhookEvent', event);

    const started = messages.filter((message) => message.event.type === 'generation.started');
    expect(started).toHaveLength(1);
    expect(started[0].id).toBe(`msg_${id}_started`);
    expect(started[0].event.data).toMatchObject({ status: 'pending', queue_position: null });
    expect(started[0].event.data.started_at).not.toBeNull();
    expect(started[0].event.timestamp).toBe(started[0].event.data.started_at);

    const progress = messages.filter((message) => message.event.type === 'generation.progress');
    expect(progress.length).toBeGreaterThan(0);
    const values = progress.map((message) => message.event.data.progress!);
    expect(progress.map((message) => message.id)).toEqual(
      values.map((value) => `msg_${id}_progress_${Math.round(value * 1000)}`),
    );
    expect(new Set(progress.map((message) => message.id)).size).toBe(progress.length);

    const final = messages.filter((message) => message.event.type === 'generation.completed');
    expect(final.map((message) => message.id)).toEqual([`msg_${id}`]);
    // The item's webhook tells of the final state's message alone.
    const item = (await client.get(id)).body;
    expect(item.webhook).toMatchObject({ state: 'delivered', attempts: 1 });
  }, 60_000);

  it('sends only the final state without webhook_events, as before', async () => {
    fake.run({ kind: 'succeed', steps: 3, stepMs: 300 });
    const id = await client.createJob({ tool: 'default', image: await image(), webhook_url: receiverUrl });

    await waitUntil(async () => (await messagesOf(id)).length > 0, 'the final message', 30_000);
    await client.waitForFinal(id);
    await waitUntil(async () => (await client.get(id)).body.webhook?.state === 'delivered', 'the delivery');

    expect((await messagesOf(id)).map((message) => [message.id, message.event.type])).toEqual([
      [`msg_${id}`, 'generation.completed'],
    ]);
  }, 60_000);

  it.each([
    [
      'an unknown event',
      [
        ['webhook_url', 'RECEIVER'],
        ['webhook_events', 'finished'],
      ],
    ],
    ['events without a webhook_url', [['webhook_events', 'started']]],
  ])('refuses %s: 422 naming webhook_events, and creates nothing', async (_, fields) => {
    const before = (await client.list()).body.total;
    const parts = fields.map(([name, value]) => [name, value === 'RECEIVER' ? receiverUrl : value] as [string, string]);

    const response = await client.postJob([['tool', 'default'], ['image', await image()], ...parts]);
    const body = (await expectMatchesContract(response, 'POST', CREATE_PATH)) as ProblemBody;

    expect(response.status).toBe(422);
    expect(body.code).toBe('invalid_webhook_events');
    expect(body.errors?.map((error) => error.field)).toEqual(['webhook_events']);
    expect((await client.list()).body.total).toBe(before);
  });
});
