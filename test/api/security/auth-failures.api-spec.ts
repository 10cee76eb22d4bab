import { randomUUID } from 'node:crypto';
import { generateApiKey } from '../../../src/common/api-key.js';
import { type PrivateServer, startPrivateRedis } from '../../support/private-servers.js';
import { expectMatchesContract } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { inputsFor } from '../../support/jobs.js';
import { signedMediaPath } from '../../support/media.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { postJob } from '../../support/client.js';

// Raw requests throughout: this file is about the Authorization header itself.

/** One of each way to get a 401: no header, another scheme, a malformed key, an unknown key, no key at all. */
const WRONG_AUTHORIZATIONS: Record<string, string>[] = [
  {},
  { Authorization: 'Basic x' },
  { Authorization: 'Bearer not-a-key' },
  { Authorization: `Bearer ${generateApiKey()}` },
  { Authorization: 'Bearer' },
];
const LIMIT = WRONG_AUTHORIZATIONS.length;

/** Every operation that needs a key, as a request and its contract path. */
function authenticatedOperations(baseUrl: string, id: string) {
  return [
    { method: 'GET', template: '/generation/tools', path: '/generation/tools' },
    { method: 'GET', template: '/generation/generationTypes', path: '/generation/generationTypes?tool=default' },
    { method: 'GET', template: '/user/generation-history', path: '/user/generation-history' },
    { method: 'GET', template: '/user/generation-history/{id}', path: `/user/generation-history/${id}` },
    { method: 'DELETE', template: '/user/generation-history/{id}', path: `/user/generation-history/${id}` },
    {
      method: 'PATCH',
      template: '/user/generation-history/feedback/{id}',
      path: `/user/generation-history/feedback/${id}`,
      body: JSON.stringify({ like: true }),
      headers: { 'Content-Type': 'application/json' },
    },
  ].map((operation) => ({
    ...operation,
    send: (headers: Record<string, string>) =>
      fetch(`${baseUrl}${operation.path}`, {
        method: operation.method,
        body: operation.body,
        headers: { ...operation.headers, ...headers },
      }),
  }));
}

async function expectRefusedForFailures(response: Response, method: string, template: string): Promise<void> {
  expect(response.status).toBe(429);
  const retryAfter = Number(response.headers.get('retry-after'));
  expect(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60).toBe(true);
  const body = await expectMatchesContract(response, method, template);
  expect(body).toMatchObject({ status: 429, code: 'rate_limited' });
}

describe('failed authentications per client address', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let validKey: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    // Behind one proxy, so each test can act as clients of its own (X-Forwarded-For).
    sut = await startService({
      ...env.serviceEnv,
      ROLE: 'api',
      AUTH_FAILURES_PER_MINUTE: String(LIMIT),
      TRUST_PROXY: '1',
    });
    validKey = await createUserWithKey(env.databaseUrl);
  }, 60_000);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  const tools = (headers: Record<string, string>) => fetch(`${sut.baseUrl}/generation/tools`, { headers });

  /** LIMIT 401s from `address`, each a different way of getting the key wrong. */
  async function failFrom(address: string): Promise<void> {
    for (const authorization of WRONG_AUTHORIZATIONS) {
      const response = await tools({ 'X-Forwarded-For': address, ...authorization });
      expect(response.status).toBe(401);
    }
  }

  it(`refuses an address after ${LIMIT} failures with 429 rate_limited and Retry-After, even with a valid key`, async () => {
    const address = '203.0.113.10';
    await failFrom(address);

    const response = await tools({ 'X-Forwarded-For': address, Authorization: `Bearer ${validKey}` });

    await expectRefusedForFailures(response, 'GET', '/generation/tools');
  });

  it('refuses it on every operation that needs a key, as the contract documents', async () => {
    const address = '203.0.113.11';
    await failFrom(address);
    const headers = { 'X-Forwarded-For': address, Authorization: `Bearer ${validKey}` };

    for (const operation of authenticatedOperations(sut.baseUrl, randomUUID())) {
      await expectRefusedForFailures(await operation.send(headers), operation.method, operation.template);
    }
    const create = await postJob(sut.baseUrl, validKey, await inputsFor('default'), { 'X-Forwarded-For': address });
    await expectRefusedForFailures(create, 'POST', '/generation/generate_image_v2/');
  });

  it('does not count failures against another address, nor refuse its valid key', async () => {
    await failFrom('203.0.113.12');

    const other = await tools({ 'X-Forwarded-For': '203.0.113.13', Authorization: `Bearer ${validKey}` });
    const direct = await tools({ Authorization: `Bearer ${validKey}` });
    const otherWrong = await tools({ 'X-Forwarded-For': '203.0.113.13', Authorization: 'Bearer wrong' });

    expect(other.status).toBe(200);
    expect(direct.status).toBe(200);
    expect(otherWrong.status).toBe(401);
  });

  it('counts one IPv6 /64 as one client', async () => {
    await failFrom('2001:db8:7:1::1');

    const sameNetwork = await tools({ 'X-Forwarded-For': '2001:db8:7:1:ffff::2', Authorization: `Bearer ${validKey}` });
    const otherNetwork = await tools({ 'X-Forwarded-For': '2001:db8:7:2::1', Authorization: `Bearer ${validKey}` });

    expect(sameNetwork.status).toBe(429);
    expect(otherNetwork.status).toBe(200);
  });

  it('keeps public routes open to a refused address', async () => {
    const address = '203.0.113.14';
    await failFrom(address);
    const from = { 'X-Forwarded-For': address };

    expect((await fetch(`${sut.baseUrl}/health/live`, { headers: from })).status).toBe(200);
    expect((await fetch(`${sut.baseUrl}/openapi.json`, { headers: from })).status).toBe(200);
    const media = `${sut.baseUrl}/${signedMediaPath(env.serviceEnv, randomUUID(), 'preview.webp')}`;
    expect((await fetch(media, { headers: from })).status).toBe(404);
  });

  it('does not count successes, nor let them reset the count', async () => {
    const address = '203.0.113.15';
    for (let i = 0; i < 3 * LIMIT; i++) {
      expect((await tools({ 'X-Forwarded-For': address, Authorization: `Bearer ${validKey}` })).status).toBe(200);
    }
    await failFrom(address);

    expect((await tools({ 'X-Forwarded-For': address, Authorization: `Bearer ${validKey}` })).status).toBe(429);
  });
});

describe('failed authentications without a trusted proxy, and with Redis down', () => {
  let redis: PrivateServer;
  let env: TestEnvironment;
  let sut: RunningService;
  let validKey: string;

  beforeAll(async () => {
    redis = await startPrivateRedis();
    env = await createTestEnvironment({ redisUrl: redis.url });
    // LOG_LEVEL info: the service says when Redis is back, which the second test waits for.
    sut = await startService({
      ...env.serviceEnv,
      ROLE: 'api',
      AUTH_FAILURES_PER_MINUTE: String(LIMIT),
      LOG_LEVEL: 'info',
    });
    validKey = await createUserWithKey(env.databaseUrl);
  }, 60_000);

  afterAll(async () => {
    await sut?.stop();
    await redis?.start(); // dispose() removes the run's Redis keys
    await env?.dispose();
    await redis?.dispose();
  }, 60_000);

  const tools = (headers: Record<string, string>) => fetch(`${sut.baseUrl}/generation/tools`, { headers });

  it('fails open while Redis is down: valid keys work, wrong ones get 401, never 5xx or 429', async () => {
    await redis.stop();

    const answers: number[] = [];
    for (let i = 0; i < 3 * LIMIT; i++) {
      answers.push((await tools({ Authorization: 'Bearer wrong' })).status);
      answers.push((await tools({ Authorization: `Bearer ${validKey}` })).status);
    }
    const list = await fetch(`${sut.baseUrl}/user/generation-history`, {
      headers: { Authorization: `Bearer ${validKey}` },
    });
    const unknown = await tools({ Authorization: `Bearer ${generateApiKey()}` });

    expect(answers).toEqual(Array.from({ length: 3 * LIMIT }, () => [401, 200]).flat());
    expect(list.status).toBe(200);
    await expectMatchesContract(list, 'GET', '/user/generation-history');
    expect(unknown.status).toBe(401);
    // Said once for the outage, not once a request.
    expect(sut.output().match(/failed authentications are not counted/g)).toHaveLength(1);
  });

  it('counts again once Redis is back, and ignores X-Forwarded-For from an untrusted peer', async () => {
    await redis.start();
    // The service's connection comes back on its own; only a failure goes to Redis, so one tells when.
    for (let i = 0; i < 100 && !sut.output().includes('reachable again'); i++) {
      await tools({ Authorization: 'Bearer wrong' });
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(sut.output()).toContain('Redis is reachable again');
    // The failure that found Redis back was counted: the limit's remainder is what is left to use.

    // Each failure claims another address; without TRUST_PROXY they all count against the real peer.
    for (let i = 1; i < LIMIT; i++) {
      expect((await tools({ 'X-Forwarded-For': `198.51.100.${i}`, Authorization: 'Bearer wrong' })).status).toBe(401);
    }
    const response = await tools({ 'X-Forwarded-For': '198.51.100.200', Authorization: `Bearer ${validKey}` });

    await expectRefusedForFailures(response, 'GET', '/generation/tools');
  }, 30_000);
});
