import { createHash, randomUUID } from 'node:crypto';
import { generateApiKey, lookupPrefix } from '../../../src/common/api-key.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { bearer, type FormValue, postJob } from '../../support/client.js';

/** Query parameters a client might put a key into; none of them is ever read. */
const KEY_PARAMETERS = ['api_key', 'apikey', 'key', 'access_token', 'token', 'authorization', 'Authorization'];

/** Every form the service could leak a key in: the key, its secret part, its SHA-256 in the usual encodings. */
function leakForms(key: string): string[] {
  const hash = createHash('sha256').update(key).digest();
  return [
    key,
    key.slice(lookupPrefix(key).length),
    hash.toString('hex'),
    hash.toString('base64'),
    hash.toString('base64url'),
  ];
}

describe('API keys outside the Authorization header, and in logs', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let validKey: string;
  let otherKey: string;
  let unknownKey: string;
  let forgedKey: string;
  let nextAddress = 1;
  /** A client address of its own (the service trusts one proxy), so no request here is refused for failures. */
  const freshAddress = () => ({ 'X-Forwarded-For': `192.0.2.${nextAddress++}` });

  beforeAll(async () => {
    env = await createTestEnvironment();
    // The most verbose logging and no authentication cache, so every key goes through every code path that logs.
    sut = await startService({
      ...env.serviceEnv,
      LOG_LEVEL: 'trace',
      AUTH_CACHE_TTL_MS: '0',
      AUTH_FAILURES_PER_MINUTE: '3',
      TRUST_PROXY: '1',
    });
    validKey = await createUserWithKey(env.databaseUrl);
    otherKey = await createUserWithKey(env.databaseUrl);
    unknownKey = generateApiKey();
    forgedKey = lookupPrefix(validKey) + generateApiKey().slice(lookupPrefix(validKey).length);
  }, 60_000);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  const paths = () => [
    '/generation/tools',
    '/generation/generationTypes?tool=default',
    '/user/generation-history',
    `/user/generation-history/${randomUUID()}`,
  ];

  it('never accepts a key in the query string, on any operation, under any parameter name', async () => {
    for (const path of paths()) {
      for (const parameter of KEY_PARAMETERS) {
        const separator = path.includes('?') ? '&' : '?';
        for (const value of [validKey, `Bearer ${validKey}`]) {
          const url = `${sut.baseUrl}${path}${separator}${parameter}=${encodeURIComponent(value)}`;

          const response = await fetch(url, { headers: freshAddress() });

          expect([url, response.status]).toEqual([url, 401]);
          expect(response.headers.get('www-authenticate')).toBe('Bearer');
        }
      }
    }
  });

  it('prints no key and no hash of one, whatever the request did with the key', async () => {
    const keys = [validKey, otherKey, unknownKey, forgedKey];
    const send = (path: string, init: RequestInit = {}) =>
      fetch(`${sut.baseUrl}${path}`, init).then((r) => r.arrayBuffer());
    // Raw requests: the key goes where no client would put it, and forged keys are sent too.
    for (const key of keys) {
      const authorization = bearer(key);
      for (const path of paths()) {
        const separator = path.includes('?') ? '&' : '?';
        await send(path, { headers: { ...authorization, ...freshAddress() } });
        await send(`${path}${separator}api_key=${key}&access_token=${key}`, { headers: freshAddress() });
        await send(`${path}${separator}api_key=${key}`, { headers: { ...authorization, ...freshAddress() } });
      }
      // In the path, as the request id, as an idempotency key, in bodies: all of them client mistakes.
      await send(`/user/generation-history/${key}`, { headers: { ...authorization, ...freshAddress() } });
      await send(`/media/${key}/preview.webp`, { headers: freshAddress() });
      await send(`/no/such/route/${key}?key=${key}`, { headers: { ...authorization, ...freshAddress() } });
      await send('/generation/tools', { headers: { ...authorization, 'X-Request-Id': key, ...freshAddress() } });
      await send(`/user/generation-history/feedback/${randomUUID()}`, {
        method: 'PATCH',
        headers: { ...authorization, 'Content-Type': 'application/json', ...freshAddress() },
        body: JSON.stringify({ like: key }),
      });
      await send(`/user/generation-history/feedback/${randomUUID()}`, {
        method: 'PATCH',
        headers: { ...authorization, 'Content-Type': 'application/json', ...freshAddress() },
        body: `{"like": "${key}`,
      });
      const fields: Record<string, FormValue> = { tool: key, [key]: key, api_key: key };
      await postJob(sut.baseUrl, key, fields, { 'Idempotency-Key': key, ...freshAddress() }).then((r) =>
        r.arrayBuffer(),
      );
    }
    // One address out of failures: the refusals (429) see keys too.
    const refused = freshAddress();
    for (const key of [...keys, ...keys])
      await send('/generation/tools', { headers: { Authorization: `Bearer ${key}`, ...refused } });
    const last = await fetch(`${sut.baseUrl}/generation/tools?api_key=${validKey}`, { headers: freshAddress() });
    await last.arrayBuffer();
    // The access log line of the last request names its id: once it is in, every line before it is too.
    const lastId = last.headers.get('x-request-id')!;
    for (let i = 0; i < 200 && !sut.output().includes(lastId); i++)
      await new Promise((resolve) => setTimeout(resolve, 25));

    const lines = sut.output().split('\n');
    const forms = keys.flatMap(leakForms);

    expect(lines.some((line) => line.includes(lastId))).toBe(true);
    expect(lines.filter((line) => line.includes('request completed')).length).toBeGreaterThan(100);
    expect(lines.filter((line) => forms.some((form) => line.includes(form)))).toEqual([]);
    expect(lines.filter((line) => /igs_[0-9A-Za-z]{8,}/.test(line))).toEqual([]);
  }, 60_000);
});
