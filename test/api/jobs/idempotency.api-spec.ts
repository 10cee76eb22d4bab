import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import sharp from 'sharp';
import { expectMatchesContract } from '../../support/contract.js';
import { makeImage } from '../../support/jobs.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { waitUntil } from '../../support/harness.js';
import { serviceForBlock } from '../../support/service-block.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { file } from '../../support/uploads.js';
import {
  Client,
  CREATE_PATH,
  type FormValue,
  type JobAcceptedBody,
  type ProblemBody,
  postJob,
} from '../../support/client.js';

async function defaultJob(color = '#3a6ea5'): Promise<Record<string, FormValue>> {
  return { tool: 'default', image: file(await makeImage(320, 400, 'png', color), 'image.png', 'image/png') };
}

/** An incompressible PNG of several MiB, so handling a request takes a while. */
async function largeNoisePng(): Promise<Buffer> {
  const side = 1400;
  return sharp(randomBytes(side * side * 3), { raw: { width: side, height: side, channels: 3 } })
    .png({ compressionLevel: 0 })
    .toBuffer();
}

async function accepted(response: Response): Promise<JobAcceptedBody> {
  expect(response.status).toBe(202);
  return (await expectMatchesContract(response, 'POST', CREATE_PATH)) as JobAcceptedBody;
}

async function refused(response: Response, status: number, code: string): Promise<ProblemBody> {
  expect(response.status).toBe(status);
  const body = (await expectMatchesContract(response, 'POST', CREATE_PATH)) as ProblemBody;
  expect(body).toMatchObject({ type: `urn:igs:problem:${code}`, status, code });
  return body;
}

describe('Idempotency-Key on job creation', () => {
  // No worker: items stay pending, which changes nothing for keys.
  const block = serviceForBlock({ ROLE: 'api' });

  const newUser = () => createUserWithKey(block.env.databaseUrl);

  it('answers a repeat with the same key and payload exactly as the first time, creating one item', async () => {
    const apiKey = await newUser();
    const key = randomUUID();
    const fields = await defaultJob();

    const first = await postJob(block.sut.baseUrl, apiKey, fields, withKey(key));
    const second = await postJob(block.sut.baseUrl, apiKey, fields, withKey(key));

    const firstBody = await accepted(first);
    expect(second.status).toBe(first.status);
    expect(await accepted(second)).toEqual(firstBody);
    expect(second.headers.get('location')).toBe(first.headers.get('location'));
    const history = await new Client(block.sut.baseUrl, apiKey).list();
    expect(history.body.total).toBe(1);
    expect(history.body.items.map((item) => item.history_item_id)).toEqual([firstBody.history_item_id]);
  });

  it('refuses the same key with other file bytes: 422 idempotency_key_reused', async () => {
    const apiKey = await newUser();
    const key = randomUUID();
    await accepted(await postJob(block.sut.baseUrl, apiKey, await defaultJob('#3a6ea5'), withKey(key)));

    const response = await postJob(block.sut.baseUrl, apiKey, await defaultJob('#a53a3a'), withKey(key));

    await refused(response, 422, 'idempotency_key_reused');
    expect((await new Client(block.sut.baseUrl, apiKey).list()).body.total).toBe(1);
  });

  it("keeps users' keys apart: another user's request with the same key creates its own item", async () => {
    const [alice, bob] = await Promise.all([newUser(), newUser()]);
    const key = randomUUID();
    const fields = await defaultJob();

    const alicesJob = await accepted(await postJob(block.sut.baseUrl, alice, fields, withKey(key)));
    const bobsJob = await accepted(await postJob(block.sut.baseUrl, bob, fields, withKey(key)));

    expect(bobsJob.history_item_id).not.toBe(alicesJob.history_item_id);
    expect((await new Client(block.sut.baseUrl, alice).list()).body.items.map((item) => item.history_item_id)).toEqual([
      alicesJob.history_item_id,
    ]);
    expect((await new Client(block.sut.baseUrl, bob).list()).body.items.map((item) => item.history_item_id)).toEqual([
      bobsJob.history_item_id,
    ]);
  });

  it('refuses a key of 256 characters, and an empty one, with 400 validation_failed', async () => {
    const apiKey = await newUser();
    const fields = await defaultJob();

    for (const key of ['k'.repeat(256), '']) {
      const response = await postJob(block.sut.baseUrl, apiKey, fields, withKey(key));

      const body = await refused(response, 400, 'validation_failed');
      expect(body.errors).toEqual([expect.objectContaining({ field: 'Idempotency-Key' })]);
    }
    expect((await new Client(block.sut.baseUrl, apiKey).list()).body.total).toBe(0);
  });

  it('accepts a key of 255 characters', async () => {
    const apiKey = await newUser();

    const response = await postJob(block.sut.baseUrl, apiKey, await defaultJob(), withKey('k'.repeat(255)));

    await accepted(response);
  });

  it('answers a concurrent duplicate either with the same 202 or with 409 idempotency_in_progress', async () => {
    const apiKey = await newUser();
    const key = randomUUID();
    const fields = { tool: 'default', image: file(await largeNoisePng(), 'image.png', 'image/png') };

    const responses = await Promise.all([
      postJob(block.sut.baseUrl, apiKey, fields, withKey(key)),
      postJob(block.sut.baseUrl, apiKey, fields, withKey(key)),
    ]);

    const winners = responses.filter((response) => response.status === 202);
    expect(winners.length).toBeGreaterThanOrEqual(1);
    const [first, ...others] = await Promise.all(winners.map(accepted));
    for (const other of others) expect(other).toEqual(first);
    const losers = responses.filter((response) => response.status !== 202);
    for (const loser of losers) await refused(loser, 409, 'idempotency_in_progress');
    expect((await new Client(block.sut.baseUrl, apiKey).list()).body.total).toBe(1);
    // Once the first is handled, a retry gets its answer.
    expect(await accepted(await postJob(block.sut.baseUrl, apiKey, fields, withKey(key)))).toEqual(first);
  }, 30_000);

  it('does not spend the key on a request that failed validation', async () => {
    const apiKey = await newUser();
    const key = randomUUID();
    const notAnImage = file(Buffer.from('plain text, not an image\n'.repeat(10)), 'image.png', 'image/png');
    await refused(
      await postJob(block.sut.baseUrl, apiKey, { tool: 'default', image: notAnImage }, withKey(key)),
      415,
      'unsupported_media_type',
    );

    const corrected = await postJob(block.sut.baseUrl, apiKey, await defaultJob(), withKey(key));

    const body = await accepted(corrected);
    expect((await new Client(block.sut.baseUrl, apiKey).list()).body.items.map((item) => item.history_item_id)).toEqual(
      [body.history_item_id],
    );
  });
});

/**
 * Redis behind a TCP proxy that cuts the connection whenever a client sends a command containing `cutOn`: the command
 * fails as it would when Redis goes away at that moment, and the connection comes back.
 */
async function startCuttingProxy(
  redisUrl: string,
): Promise<{ url: string; cutOn?: string; cuts: number; close(): Promise<void> }> {
  const upstream = new URL(redisUrl);
  const sockets = new Set<Socket>();
  const proxy = {
    url: '',
    cutOn: undefined as string | undefined,
    cuts: 0,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = createServer((client) => {
    const redis = connect(Number(upstream.port || 6379), upstream.hostname);
    for (const socket of [client, redis]) {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.once('close', () => {
        sockets.delete(socket);
        client.destroy();
        redis.destroy();
      });
    }
    client.on('data', (chunk: Buffer) => {
      if (proxy.cutOn !== undefined && chunk.includes(proxy.cutOn)) {
        proxy.cuts++;
        client.destroy();
        return;
      }
      redis.write(chunk);
    });
    redis.pipe(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  proxy.url = `redis://127.0.0.1:${(server.address() as { port: number }).port}`;
  return proxy;
}

describe('Idempotency-Key when the answer cannot be stored', () => {
  let env: TestEnvironment;
  let redis: Awaited<ReturnType<typeof startCuttingProxy>>;
  let api: RunningService;

  beforeAll(async () => {
    env = await createTestEnvironment();
    redis = await startCuttingProxy(env.redisUrl);
    api = await startService({ ...env.serviceEnv, ROLE: 'api', REDIS_URL: redis.url });
  }, 60_000);

  afterAll(async () => {
    await api?.stop();
    await redis?.close();
    await env?.dispose();
  }, 60_000);

  it("answers the client's retry with the job already accepted, never a second one, and keeps the key", async () => {
    const apiKey = await createUserWithKey(env.databaseUrl);
    const key = randomUUID();
    const fields = await defaultJob();
    // The write of the answer: the only command that carries a `done` entry.
    redis.cutOn = '"state":"done"';

    const first = await accepted(await postJob(api.baseUrl, apiKey, fields, withKey(key)));
    expect(redis.cuts).toBeGreaterThan(0);
    redis.cutOn = undefined;

    // The service's connection comes back after the cut: until then a creation answers 503, as in any Redis outage.
    let retry: Response | undefined;
    await waitUntil(async () => {
      retry = await postJob(api.baseUrl, apiKey, fields, withKey(key));
      return retry.status !== 503;
    }, 'an answer other than 503 to the retry');
    expect(await accepted(retry!)).toEqual(first);
    const history = await new Client(api.baseUrl, apiKey).list();
    expect(history.body.items.map((item) => item.history_item_id)).toEqual([first.history_item_id]);
    // The key stays taken by that job: another request under it is refused.
    await refused(
      await postJob(api.baseUrl, apiKey, await defaultJob('#a53a3a'), withKey(key)),
      422,
      'idempotency_key_reused',
    );
  });
});

function withKey(key: string): Record<string, string> {
  return { 'Idempotency-Key': key };
}
