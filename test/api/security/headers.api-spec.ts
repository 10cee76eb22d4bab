import { randomUUID } from 'node:crypto';
import { expectMatchesContract } from '../../support/contract.js';
import { inputsFor } from '../../support/jobs.js';
import { signedMediaPath } from '../../support/media.js';
import { serviceForBlock } from '../../support/service-block.js';
import { createUserWithKey } from '../../support/service.js';
import { bearer, postJob, waitForFinal } from '../../support/client.js';

/** Helmet's headers that every response carries, whatever it is. */
const ON_EVERY_RESPONSE: Record<string, string | RegExp> = {
  'x-content-type-options': 'nosniff',
  'strict-transport-security': /^max-age=\d+/,
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
  'x-permitted-cross-domain-policies': 'none',
  'content-security-policy': /frame-ancestors 'none'/,
};

type Directives = Map<string, string[]>;

function parseCsp(header: string | null): Directives {
  const directives: Directives = new Map();
  for (const directive of (header ?? '').split(';')) {
    const [name, ...sources] = directive.trim().split(/\s+/);
    if (name) directives.set(name, sources);
  }
  return directives;
}

/** The sources a fetch directive allows, falling back to `default-src` as browsers do. */
function allowed(csp: Directives, directive: string): string[] {
  return csp.get(directive) ?? csp.get('default-src') ?? [];
}

function expectHardened(response: Response, what: string): void {
  for (const [name, expected] of Object.entries(ON_EVERY_RESPONSE)) {
    const value = response.headers.get(name);
    if (value === null || (typeof expected === 'string' ? value !== expected : !expected.test(value))) {
      throw new Error(`${what}: ${name} is ${JSON.stringify(value)}, expected ${expected}`);
    }
  }
  if (response.headers.has('x-powered-by')) throw new Error(`${what}: X-Powered-By is sent`);
}

function corsHeaders(response: Response): string[] {
  return [...response.headers.keys()].filter((name) => name.startsWith('access-control-'));
}

describe('security headers, with CORS closed (no CORS_ORIGINS)', () => {
  const block = serviceForBlock();
  let apiKey: string;
  let itemId: string;

  beforeAll(async () => {
    apiKey = await createUserWithKey(block.env.databaseUrl);
    const created = await postJob(block.sut.baseUrl, apiKey, await inputsFor('fashion_card'));
    itemId = ((await created.json()) as { history_item_id: string }).history_item_id;
    expect((await waitForFinal(block.sut.baseUrl, apiKey, itemId)).status).toBe('complete');
  }, 90_000);

  // Raw requests: this file is about the headers themselves, on every kind of answer.
  const auth = () => bearer(apiKey);
  const signed = (id: string, file: 'preview.webp' | 'stock.jpg') => signedMediaPath(block.env.serviceEnv, id, file);

  /** One request of every kind: success and error, API and media, JSON, YAML, problem and image. */
  function everyKind(): { what: string; send: () => Promise<Response> }[] {
    const get =
      (path: string, headers: Record<string, string> = {}) =>
      () =>
        fetch(`${block.sut.baseUrl}${path}`, { headers });
    return [
      { what: 'GET /generation/tools (200)', send: get('/generation/tools', auth()) },
      { what: 'GET /generation/tools without a key (401)', send: get('/generation/tools') },
      {
        what: 'GET /generation/generationTypes?tool=hat (404)',
        send: get('/generation/generationTypes?tool=hat', auth()),
      },
      { what: 'GET /user/generation-history (200)', send: get('/user/generation-history', auth()) },
      {
        what: 'GET /user/generation-history/not-a-uuid (400)',
        send: get('/user/generation-history/not-a-uuid', auth()),
      },
      {
        what: 'PATCH feedback with broken JSON (400 before any route)',
        send: () =>
          fetch(`${block.sut.baseUrl}/user/generation-history/feedback/${itemId}`, {
            method: 'PATCH',
            headers: { ...auth(), 'Content-Type': 'application/json' },
            body: '{"like": tru',
          }),
      },
      {
        what: 'POST a job without a body (400)',
        send: () => fetch(`${block.sut.baseUrl}/generation/generate_image_v2/`, { method: 'POST', headers: auth() }),
      },
      { what: 'GET /media preview (200)', send: get(`/${signed(itemId, 'preview.webp')}`) },
      { what: 'GET /media stock (200)', send: get(`/${signed(itemId, 'stock.jpg')}`) },
      { what: 'GET /media stock with the key (200)', send: get(`/media/${itemId}/stock.jpg`, auth()) },
      { what: 'GET /media unsigned (403)', send: get(`/media/${itemId}/stock.jpg`) },
      { what: 'GET /media of nothing (404)', send: get(`/${signed(randomUUID(), 'preview.webp')}`) },
      { what: 'GET /health/live', send: get('/health/live') },
      { what: 'GET /health/ready', send: get('/health/ready') },
      { what: 'GET /openapi.json', send: get('/openapi.json') },
      { what: 'GET /openapi.yaml', send: get('/openapi.yaml') },
      { what: 'GET /docs', send: get('/docs') },
      { what: 'GET /docs/swagger-ui-bundle.js', send: get('/docs/swagger-ui-bundle.js') },
      { what: 'GET /no/such/route (404)', send: get('/no/such/route') },
      {
        what: 'OPTIONS preflight (no CORS: 404)',
        send: () =>
          fetch(`${block.sut.baseUrl}/generation/tools`, {
            method: 'OPTIONS',
            headers: { Origin: 'https://app.example.com', 'Access-Control-Request-Method': 'GET' },
          }),
      },
    ];
  }

  it('puts nosniff, HSTS, Referrer-Policy, framing and CSP headers on every response', async () => {
    for (const { what, send } of everyKind()) expectHardened(await send(), what);
  });

  it('answers API reads in full every time: no ETag, and no 304 the contract does not have', async () => {
    for (const path of ['/generation/tools', '/user/generation-history', `/user/generation-history/${itemId}`]) {
      const first = await fetch(`${block.sut.baseUrl}${path}`, { headers: auth() });
      const again = await fetch(`${block.sut.baseUrl}${path}`, { headers: { ...auth(), 'If-None-Match': '*' } });

      expect([path, first.status, first.headers.get('etag'), again.status]).toEqual([path, 200, null, 200]);
    }
  });

  it('locks API and media responses down completely: nothing runs, loads or frames', async () => {
    for (const path of [
      '/generation/tools',
      '/health/live',
      '/openapi.yaml',
      `/media/${itemId}/stock.jpg`,
      '/no/such/route',
    ]) {
      const response = await fetch(`${block.sut.baseUrl}${path}`, { headers: auth() });

      const csp = parseCsp(response.headers.get('content-security-policy'));
      expect([path, csp.get('default-src')]).toEqual([path, ["'none'"]]);
      expect(csp.has('upgrade-insecure-requests')).toBe(false);
    }
  });

  it('lets frontends on other origins embed result images, and only those', async () => {
    const media = await fetch(`${block.sut.baseUrl}/${signed(itemId, 'preview.webp')}`);
    const api = await fetch(`${block.sut.baseUrl}/generation/tools`, { headers: auth() });

    expect(media.status).toBe(200);
    await expectMatchesContract(media, 'GET', '/media/{id}/{file}');
    expect(media.headers.get('cross-origin-resource-policy')).toBe('cross-origin');
    expect(api.headers.get('cross-origin-resource-policy')).toBe('same-origin');
  });

  it.each(['/docs', '/docs/'])(
    'serves Swagger UI at %s with everything it loads allowed by its CSP, and no inline script',
    async (page) => {
      const response = await fetch(`${block.sut.baseUrl}${page}`);
      const html = await response.text();
      const csp = parseCsp(response.headers.get('content-security-policy'));

      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/^text\/html/);
      const scripts = [...html.matchAll(/<script\b([^>]*)>/g)].map((match) => match[1]);
      const srcOf = (attributes: string) => /\bsrc="([^"]+)"/.exec(attributes)?.[1];
      expect(scripts.length).toBeGreaterThan(0);
      expect(scripts.filter((attributes) => !srcOf(attributes))).toEqual([]); // 'unsafe-inline' is not needed
      const stylesheets = [...html.matchAll(/<link\b[^>]*\bhref="([^"]+)"/g)].map((match) => match[1]);
      const assets = [...scripts.map((attributes) => srcOf(attributes)!), ...stylesheets];

      expect(allowed(csp, 'script-src')).toContain("'self'");
      expect(allowed(csp, 'script-src')).not.toContain("'unsafe-inline'");
      expect(allowed(csp, 'script-src')).not.toContain("'unsafe-eval'");
      expect(allowed(csp, 'style-src')).toEqual(expect.arrayContaining(["'self'", "'unsafe-inline'"])); // its <style> blocks
      expect(allowed(csp, 'img-src')).toEqual(expect.arrayContaining(["'self'", 'data:'])); // icons in its CSS
      expect(csp.has('upgrade-insecure-requests')).toBe(false);
      for (const asset of assets) {
        const url = new URL(asset, `${block.sut.baseUrl}${page}`);
        const loaded = await fetch(url);

        expect([asset, url.origin, loaded.status]).toEqual([asset, block.sut.baseUrl, 200]);
        const type = loaded.headers.get('content-type') ?? '';
        if (asset.endsWith('.js')) expect(type).toMatch(/javascript/);
        if (asset.endsWith('.css')) {
          expect(type).toMatch(/^text\/css/);
          // Everything the stylesheet loads is inline data, which img-src allows.
          const css = await loaded.text();
          const urls = [...css.matchAll(/url\(\s*["']?([^"')]+)/g)].map((match) => match[1]);
          expect(urls.filter((u) => !u.startsWith('data:'))).toEqual([]);
        }
        expectHardened(loaded, `${page} asset ${asset}`);
      }
      // The contract is built into the init script: the page fetches nothing from another origin to show it.
      const init = await (
        await fetch(
          new URL(
            assets.find((a) => a.endsWith('swagger-ui-init.js'))!,
            `${block.sut.baseUrl}${page}`,
          ),
        )
      ).text();
      expect(init).toContain('"title": "Image Generation Service API"');
    },
  );

  it('sends no CORS header at all, not even to a preflight or a request with an Origin', async () => {
    const origin = { Origin: 'https://app.example.com' };
    const preflight = await fetch(`${block.sut.baseUrl}/generation/tools`, {
      method: 'OPTIONS',
      headers: { ...origin, 'Access-Control-Request-Method': 'GET', 'Access-Control-Request-Headers': 'authorization' },
    });
    const actual = await fetch(`${block.sut.baseUrl}/generation/tools`, { headers: { ...origin, ...auth() } });

    expect(corsHeaders(preflight)).toEqual([]);
    expect(preflight.status).toBe(404);
    expect(corsHeaders(actual)).toEqual([]);
    expect(actual.status).toBe(200);
  });
});

describe('CORS for configured frontend origins', () => {
  const ALLOWED = ['https://app.example.com', 'http://localhost:5173'];
  const block = serviceForBlock({ ROLE: 'api', CORS_ORIGINS: ALLOWED.join(',') });
  let apiKey: string;

  beforeAll(async () => {
    apiKey = await createUserWithKey(block.env.databaseUrl);
  }, 60_000);

  function preflight(path: string, origin: string, method: string, requestHeaders: string): Promise<Response> {
    return fetch(`${block.sut.baseUrl}${path}`, {
      method: 'OPTIONS',
      headers: {
        Origin: origin,
        'Access-Control-Request-Method': method,
        'Access-Control-Request-Headers': requestHeaders,
      },
    });
  }

  const list = (value: string | null) => (value ?? '').split(',').map((item) => item.trim().toLowerCase());

  it.each([
    ['PATCH', '/user/generation-history/feedback/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44', 'authorization,content-type'],
    ['POST', '/generation/generate_image_v2/', 'authorization,content-type,idempotency-key,prefer'],
    ['DELETE', '/user/generation-history/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44', 'authorization'],
    ['GET', '/generation/tools', 'authorization'],
    ['GET', '/user/generation-history/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44', 'authorization,prefer'],
  ])(
    'answers a preflight for %s from an allowed origin with the methods and headers it may use',
    async (method, path, headers) => {
      for (const origin of ALLOWED) {
        const response = await preflight(path, origin, method, headers);

        expect(response.status).toBe(204);
        expect(response.headers.get('access-control-allow-origin')).toBe(origin);
        expect(list(response.headers.get('access-control-allow-methods'))).toEqual(
          expect.arrayContaining(['get', 'post', 'patch', 'delete']),
        );
        expect(list(response.headers.get('access-control-allow-headers'))).toEqual(
          expect.arrayContaining(list(headers)),
        );
        expect(response.headers.get('access-control-allow-credentials')).toBeNull();
        expect(list(response.headers.get('vary'))).toContain('origin');
        expectHardened(response, `preflight ${method} ${path}`);
      }
    },
  );

  it('lets an allowed origin read the answer and the Location, Preference-Applied, Retry-After and X-Request-Id headers', async () => {
    for (const [path, headers, status] of [
      ['/generation/tools', { Authorization: `Bearer ${apiKey}` }, 200],
      ['/generation/tools', {}, 401],
      ['/user/generation-history/not-a-uuid', { Authorization: `Bearer ${apiKey}` }, 400],
    ] as const) {
      const response = await fetch(`${block.sut.baseUrl}${path}`, { headers: { ...headers, Origin: ALLOWED[0] } });

      expect(response.status).toBe(status);
      expect(response.headers.get('access-control-allow-origin')).toBe(ALLOWED[0]);
      expect(list(response.headers.get('access-control-expose-headers'))).toEqual(
        expect.arrayContaining(['location', 'preference-applied', 'retry-after', 'x-request-id']),
      );
      expect(list(response.headers.get('vary'))).toContain('origin');
    }
  });

  it.each([
    ['another site', 'https://evil.example.com'],
    ['a look-alike host', 'https://app.example.com.evil.example'],
    ['the allowed host over another scheme', 'http://app.example.com'],
    ['the allowed host on another port', 'https://app.example.com:8443'],
    ['an opaque origin', 'null'],
  ])('gives %s no Access-Control-Allow-Origin', async (_case, origin) => {
    const pre = await preflight('/generation/tools', origin, 'GET', 'authorization');
    const actual = await fetch(`${block.sut.baseUrl}/generation/tools`, {
      headers: { Origin: origin, Authorization: `Bearer ${apiKey}` },
    });

    expect(pre.headers.get('access-control-allow-origin')).toBeNull();
    expect(actual.headers.get('access-control-allow-origin')).toBeNull();
    expect(actual.status).toBe(200); // CORS is for browsers to enforce; the server still answers
  });
});
