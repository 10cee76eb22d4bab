import { randomUUID } from 'node:crypto';
import { generateApiKey, hashApiKey, lookupPrefix } from '../../../src/common/api-key.js';
import { expectMatchesContract } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { openStream } from '../../support/event-stream.js';
import { createUserWithKey, runCli, type RunningService, startService } from '../../support/service.js';

describe('authentication', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let validKey: string;
  /** Every secret sent in this file: none may show up in what the process prints. */
  const secretsSent: string[] = [];

  beforeAll(async () => {
    env = await createTestEnvironment();
    // The most verbose logging, so a key that reaches any log line is caught; no auth cache, so a
    // revocation takes effect on the next request.
    sut = await startService({ ...env.serviceEnv, AUTH_CACHE_TTL_MS: '0', LOG_LEVEL: 'trace' });
    validKey = await createUserWithKey(env.databaseUrl);
    secretsSent.push(validKey);
  }, 60_000);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  function getTools(headers: Record<string, string> = {}, query = ''): Promise<Response> {
    return fetch(`${sut.baseUrl}/generation/tools${query}`, { headers });
  }

  async function waitForOutput(text: string): Promise<void> {
    while (!sut.output().includes(text)) await new Promise((resolve) => setTimeout(resolve, 20));
  }

  async function expectUnauthorized(response: Response): Promise<void> {
    expect(response.status).toBe(401);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(response.headers.get('www-authenticate')).toMatch(/^Bearer\b/);
    const body = await expectMatchesContract(response, 'GET', '/generation/tools');
    expect(body).toMatchObject({ type: 'urn:igs:problem:unauthorized', status: 401, code: 'unauthorized' });
  }

  it('accepts a valid key', async () => {
    const response = await getTools({ authorization: `Bearer ${validKey}` });

    expect(response.status).toBe(200);
    await expectMatchesContract(response, 'GET', '/generation/tools');
  });

  it('accepts the scheme name in any case', async () => {
    const response = await getTools({ authorization: `bearer ${validKey}` });

    expect(response.status).toBe(200);
  });

  it('answers 401 without an Authorization header', async () => {
    const response = await getTools();

    await expectUnauthorized(response);
    expect(response.headers.get('www-authenticate')).toBe('Bearer');
  });

  it.each([
    ['another scheme', 'Basic x'],
    ['the scheme without a key', 'Bearer'],
    ['a key without the scheme', 'KEY_PLACEHOLDER'],
    ['two keys', 'Bearer KEY_PLACEHOLDER KEY_PLACEHOLDER'],
  ])('answers 401 for a malformed header: %s', async (_case, value) => {
    const authorization = value.replaceAll('KEY_PLACEHOLDER', validKey);

    const response = await getTools({ authorization });

    await expectUnauthorized(response);
  });

  it('answers 401 for a key that is not well formed', async () => {
    const response = await getTools({ authorization: 'Bearer not-a-key' });

    await expectUnauthorized(response);
    expect(response.headers.get('www-authenticate')).toBe('Bearer error="invalid_token"');
  });

  it('answers 401 for a well-formed key nobody was given', async () => {
    const unknownKey = generateApiKey();
    secretsSent.push(unknownKey);

    const response = await getTools({ authorization: `Bearer ${unknownKey}` });

    await expectUnauthorized(response);
    expect(response.headers.get('www-authenticate')).toBe('Bearer error="invalid_token"');
  });

  it('answers 401 for a key whose prefix is known but whose secret is wrong', async () => {
    const forged = lookupPrefix(validKey) + generateApiKey().slice(lookupPrefix(validKey).length);
    secretsSent.push(forged);

    const response = await getTools({ authorization: `Bearer ${forged}` });

    await expectUnauthorized(response);
  });

  it.each(['api_key', 'access_token'])('does not accept a key in the query string (?%s=)', async (parameter) => {
    const response = await getTools({}, `?${parameter}=${validKey}`);

    await expectUnauthorized(response);
  });

  it('answers 401 for a key once it is revoked', async () => {
    const key = await createUserWithKey(env.databaseUrl);
    secretsSent.push(key);
    expect((await getTools({ authorization: `Bearer ${key}` })).status).toBe(200);

    const revoke = await runCli(['revoke', lookupPrefix(key)], env.serviceEnv);

    expect(revoke.code).toBe(0);
    const response = await getTools({ authorization: `Bearer ${key}` });
    await expectUnauthorized(response);
    expect(response.headers.get('www-authenticate')).toBe('Bearer error="invalid_token"');
    expect((await getTools({ authorization: `Bearer ${validKey}` })).status).toBe(200);
  }, 30_000);

  it("ends the event streams a key opened once it is revoked, and not the streams of the user's other keys", async () => {
    const user = `user-${randomUUID()}`;
    const revoked = await createUserWithKey(env.databaseUrl, user);
    const created = await runCli(['keys', 'create', '--user', user], env.serviceEnv);
    expect(created.code).toBe(0);
    const kept = created.stdout.trim();
    secretsSent.push(revoked, kept);
    const [onRevoked, onKept] = await Promise.all([
      openStream(`${sut.baseUrl}/user/events`, revoked),
      openStream(`${sut.baseUrl}/user/events`, kept),
    ]);
    let keptEnded = false;
    void onKept.ended.then(() => (keptEnded = true));
    try {
      expect([onRevoked.status, onKept.status]).toEqual([200, 200]);

      expect((await runCli(['keys', 'revoke', lookupPrefix(revoked)], env.serviceEnv)).code).toBe(0);

      // Ends within a second or two (AUTH_CACHE_TTL_MS is 0 here); the test's own timeout is the bound.
      await onRevoked.ended;
      expect(keptEnded).toBe(false);
      // The client reconnecting with the revoked key is refused; the other key's stream is still open.
      expect((await openStream(`${sut.baseUrl}/user/events`, revoked)).status).toBe(401);
      expect(keptEnded).toBe(false);
    } finally {
      onRevoked.close();
      onKept.close();
    }
  }, 30_000);

  it('prints no key, key hash or Authorization value', async () => {
    const unknownKey = generateApiKey();
    secretsSent.push(unknownKey);
    await getTools({ authorization: `Bearer ${validKey}` });
    await getTools({ authorization: `Bearer ${unknownKey}` });
    await getTools({ authorization: 'Basic x' });
    await getTools({ authorization: 'Bearer not-a-key' });
    await getTools({}, `?api_key=${validKey}&access_token=${unknownKey}`);
    const last = await fetch(`${sut.baseUrl}/no/such/route?api_key=${validKey}`, {
      headers: { authorization: `Bearer ${validKey}` },
    });
    // The access log line of the last request names its id: once it is in, every line before it is too.
    await waitForOutput(last.headers.get('x-request-id')!);

    const output = sut.output();

    expect(output).not.toBe('');
    for (const secret of secretsSent) {
      const hash = hashApiKey(secret);
      expect(output).not.toContain(secret);
      expect(output).not.toContain(secret.slice(lookupPrefix(secret).length));
      expect(output).not.toContain(hash.toString('hex'));
      expect(output).not.toContain(hash.toString('base64'));
    }
    // The only "Bearer" allowed is the challenge the service itself sends back (WWW-Authenticate).
    expect(output).not.toMatch(/bearer\s+(?!error=)\S/i);
    expect(output).not.toMatch(/basic x/i);
    expect(output).not.toContain('not-a-key');
  });
});
