import { STATUS_CODES } from 'node:http';
import { connect } from 'node:net';
import { readFile } from 'node:fs/promises';
import { parse } from 'yaml';
import { expectMatchesContract } from '../../support/contract.js';
import { runToExit } from '../../support/deployment.js';
import { serviceForBlock } from '../../support/service-block.js';
import { createUserWithKey, freePort, startService } from '../../support/service.js';

const CONTRACT_FILE = new URL('../../../openapi/openapi.yaml', import.meta.url);
const MAIN = new URL('../../../dist/main.js', import.meta.url).pathname;
const FEEDBACK_PATH = '/user/generation-history/feedback/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44';

/** Starts the built service and waits for it to exit on its own (it is expected to refuse to start). */
function runUntilExit(env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return runToExit(['node', MAIN], { HOST: '127.0.0.1', ...env });
}

/** Nothing internal in an error body: no stack frames, no file paths. */
function expectNoInternals(body: string): void {
  expect(body).not.toMatch(/\bat /);
  expect(body).not.toContain('/work');
  expect(body).not.toContain('node_modules');
  expect(body).not.toMatch(/\.[cm]?[jt]s:\d+/);
  expect(body).not.toMatch(/SyntaxError|Unexpected token|Unexpected end/);
}

describe('the service process', () => {
  const block = serviceForBlock();
  let authorization: string;

  beforeAll(async () => {
    authorization = `Bearer ${await createUserWithKey(block.env.databaseUrl)}`;
  });

  function request(path: string, init: RequestInit = {}): Promise<Response> {
    return fetch(`${block.sut.baseUrl}${path}`, init);
  }

  async function sendBrokenJson(): Promise<Response> {
    return request(FEEDBACK_PATH, {
      method: 'PATCH',
      headers: { authorization, 'content-type': 'application/json' },
      body: '{"like": tru',
    });
  }

  describe('errors', () => {
    it('answers an unknown route with a 404 problem', async () => {
      const response = await request('/no/such/route', { headers: { authorization } });

      expect(response.status).toBe(404);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      expect(await response.json()).toEqual({
        type: 'urn:igs:problem:not_found',
        title: expect.any(String),
        status: 404,
        detail: expect.any(String),
        code: 'not_found',
      });
    });

    it('answers an unknown route with 404 even without a key', async () => {
      const response = await request('/no/such/route');

      expect(response.status).toBe(404);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    });

    it('answers a method a route does not have with a problem, not a 5xx', async () => {
      const response = await request('/generation/tools', { method: 'DELETE', headers: { authorization } });

      expect(response.status).toBeGreaterThanOrEqual(400);
      expect(response.status).toBeLessThan(500);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    });

    it('answers a JSON body that does not parse with a 400 problem', async () => {
      const response = await sendBrokenJson();

      expect(response.status).toBe(400);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      const body = (await expectMatchesContract(response, 'PATCH', '/user/generation-history/feedback/{id}')) as {
        code: string;
      };
      expect(body.code).toBe('bad_request');
    });

    it.each([
      ['header fields over 16 KB', 431, 'headers_too_large', 'X-Big: ' + 'a'.repeat(20_000)],
      ['a header line that is not HTTP', 400, 'bad_request', 'no colon here'],
    ])('answers a request with %s with a %i problem and an X-Request-Id', async (_case, status, code, line) => {
      const socket = connect(Number(new URL(block.sut.baseUrl).port), '127.0.0.1');
      socket.end(`GET /generation/tools HTTP/1.1\r\nHost: localhost\r\n${line}\r\n\r\n`);
      const chunks: Buffer[] = [];
      for await (const chunk of socket) chunks.push(chunk as Buffer);
      const [head, body] = Buffer.concat(chunks).toString('utf8').split('\r\n\r\n');

      expect(head.split('\r\n')[0]).toBe(`HTTP/1.1 ${status} ${STATUS_CODES[status]}`);
      expect(head).toMatch(/^Content-Type: application\/problem\+json$/im);
      expect(head).toMatch(/^X-Request-Id: [0-9a-f-]{36}$/im);
      expect(JSON.parse(body)).toMatchObject({ type: `urn:igs:problem:${code}`, status, code });
    });

    it('keeps an idle keep-alive connection open longer than the proxies in front keep theirs', async () => {
      const socket = connect(Number(new URL(block.sut.baseUrl).port), '127.0.0.1');
      let closedByServer = false;
      socket.on('close', () => (closedByServer = true));
      const answers: string[] = [];
      socket.on('data', (chunk: Buffer) => answers.push(chunk.toString('latin1')));
      const ask = async () => {
        const before = answers.length;
        socket.write('GET /health/live HTTP/1.1\r\nHost: localhost\r\n\r\n');
        while (answers.length === before && !closedByServer) await new Promise((resolve) => setTimeout(resolve, 20));
        return answers.at(-1) ?? '';
      };
      try {
        expect(await ask()).toMatch(/^HTTP\/1\.1 200 /);
        // Past Node's default of 5 s, after which an idle connection was closed under the proxy's next request.
        await new Promise((resolve) => setTimeout(resolve, 6000));

        expect(closedByServer).toBe(false);
        expect(await ask()).toMatch(/^HTTP\/1\.1 200 /);
      } finally {
        socket.destroy();
      }
    }, 30_000);

    it('puts no stack trace and no file path in any error body', async () => {
      const responses = await Promise.all([
        sendBrokenJson(),
        request('/generation/tools', {
          method: 'POST',
          headers: { authorization, 'content-type': 'application/json' },
          body: '{"a":',
        }),
        request('/generation/tools', {
          method: 'POST',
          headers: { authorization, 'content-type': 'application/json; charset=klingon' },
          body: '{}',
        }),
        request('/no/such/route'),
        request('/%E0%A4%A'),
        request('/generation/tools'),
        request('/generation/tools', { headers: { authorization: 'Bearer not-a-key' } }),
        request('/generation/generationTypes', { headers: { authorization } }),
        request('/generation/generationTypes?tool=../../etc/passwd', { headers: { authorization } }),
      ]);

      for (const response of responses) {
        expect(response.status).toBeGreaterThanOrEqual(400);
        expect(response.status).toBeLessThan(500);
        expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
        expectNoInternals(await response.text());
      }
    });
  });

  describe('X-Request-Id', () => {
    it.each([
      ['a 200 answer', '/health/live', {}],
      ['a 200 answer behind authentication', '/generation/tools', { authorization: 'AUTH' }],
      ['a 401 answer', '/generation/tools', {}],
      ['a 404 answer', '/no/such/route', {}],
      ['the contract', '/openapi.yaml', {}],
      ['the Swagger UI', '/docs', {}],
    ])('is on %s', async (_case, path, headers: Record<string, string>) => {
      const response = await request(path, {
        headers: headers.authorization ? { authorization } : {},
      });

      expect(response.headers.get('x-request-id')).toMatch(/^\S{8,}$/);
    });

    it('is on the answer to a body that does not parse', async () => {
      const response = await sendBrokenJson();

      expect(response.headers.get('x-request-id')).toMatch(/^\S{8,}$/);
    });

    it('differs from one request to the next', async () => {
      const first = await request('/health/live');
      const second = await request('/health/live');

      expect(first.headers.get('x-request-id')).not.toBe(second.headers.get('x-request-id'));
    });

    it('echoes a sane id the client sent', async () => {
      const response = await request('/generation/tools', {
        headers: { authorization, 'x-request-id': 'client-abc_123.4' },
      });

      expect(response.headers.get('x-request-id')).toBe('client-abc_123.4');
    });

    it('echoes a sane id the client sent on an error answer', async () => {
      const response = await request('/no/such/route', { headers: { 'x-request-id': 'trace-42' } });

      expect(response.headers.get('x-request-id')).toBe('trace-42');
    });

    it.each([
      ['300 characters long', 'a'.repeat(300)],
      ['with spaces', 'has some spaces'],
      ['with a header-like payload', 'id;evil=1'],
    ])('replaces an id %s', async (_case, id) => {
      const response = await request('/generation/tools', { headers: { authorization, 'x-request-id': id } });

      const answered = response.headers.get('x-request-id');
      expect(answered).toMatch(/^\S{8,}$/);
      expect(answered).not.toBe(id);
      expect(answered!.length).toBeLessThanOrEqual(128);
    });
  });

  describe('the contract', () => {
    it('serves the Swagger UI at /docs, initialised with the contract', async () => {
      const response = await request('/docs');

      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/^text\/html/);
      const html = await response.text();
      expect(html).toContain('swagger-ui');
      const initScript = /<script src="([^"]*swagger-ui-init\.js)"/.exec(html);
      expect(initScript).not.toBeNull();

      const script = await request(new URL(initScript![1], `${block.sut.baseUrl}/docs`).pathname);

      expect(script.status).toBe(200);
      const source = await script.text();
      expect(source).toContain('generate_image_v2');
      expect(source).toContain('/user/generation-history/feedback/{id}');
      expect(source).toContain('createGenerationJob');
    });

    it('serves the Swagger UI assets', async () => {
      const html = await (await request('/docs')).text();
      const bundle = /<script src="([^"]*swagger-ui-bundle\.js)"/.exec(html);
      expect(bundle).not.toBeNull();

      const response = await request(new URL(bundle![1], `${block.sut.baseUrl}/docs`).pathname);

      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toMatch(/javascript/);
    });

    // The service as the request reached it: Swagger UI's "Try it out" calls that origin.
    const servedServers = () => [{ url: block.sut.baseUrl, description: 'This service' }];

    it('serves /openapi.json equal to the YAML file but for its servers, which name this service', async () => {
      const response = await request('/openapi.json');

      expect(response.status).toBe(200);
      const body = await expectMatchesContract(response, 'GET', '/openapi.json');
      expect(body).toEqual({ ...parse(await readFile(CONTRACT_FILE, 'utf8')), servers: servedServers() });
    });

    it('serves /openapi.yaml as the file, but for its servers block, which names this service', async () => {
      const response = await request('/openapi.yaml');

      expect(response.status).toBe(200);
      await expectMatchesContract(response, 'GET', '/openapi.yaml');
      const served = await response.text();
      const committed = await readFile(CONTRACT_FILE, 'utf8');
      expect(parse(served)).toEqual({ ...parse(committed), servers: servedServers() });
      const outsideServers = (yaml: string) => yaml.replace(/^servers:\n(?:[ -].*\n)+/m, '');
      expect(outsideServers(served)).toBe(outsideServers(committed));
    });

    it('names PUBLIC_BASE_URL as the server when the service has one', async () => {
      const configured = await startService({ ...block.env.serviceEnv, PUBLIC_BASE_URL: 'https://api.example.test/' });
      try {
        const body = (await (await fetch(`${configured.baseUrl}/openapi.json`)).json()) as { servers: unknown };
        expect(body.servers).toEqual([{ url: 'https://api.example.test', description: 'This service' }]);
      } finally {
        await configured.stop();
      }
    }, 60_000);

    it('serves the contract without a key', async () => {
      const [json, yaml, docs] = await Promise.all([
        request('/openapi.json'),
        request('/openapi.yaml'),
        request('/docs'),
      ]);

      expect([json.status, yaml.status, docs.status]).toEqual([200, 200, 200]);
    });
  });

  describe('health', () => {
    it('answers /health/live with 200, without a key', async () => {
      const response = await request('/health/live');

      expect(response.status).toBe(200);
      expect(await expectMatchesContract(response, 'GET', '/health/live')).toMatchObject({ status: 'ok' });
    });

    it('answers /health/ready with 200 and both dependencies up, without a key', async () => {
      const response = await request('/health/ready');

      expect(response.status).toBe(200);
      expect(await expectMatchesContract(response, 'GET', '/health/ready')).toMatchObject({
        status: 'ok',
        details: { database: { status: 'up' }, queue: { status: 'up' } },
      });
    });
  });

  describe('start and stop', () => {
    it('refuses to start with a wrong setting, naming it', async () => {
      const result = await runUntilExit({ ...block.env.serviceEnv, PORT: 'abc' });

      expect(result.code).not.toBe(0);
      expect(result.output).toContain('PORT');
      expect(result.output).toContain('abc');
      expectNoInternals(result.output);
    }, 30_000);

    it('names every wrong setting at once', async () => {
      const result = await runUntilExit({ ...block.env.serviceEnv, PORT: 'abc', ROLE: 'x', ENGINE_FABRIC: 'foo' });

      expect(result.code).not.toBe(0);
      for (const name of ['PORT', 'ROLE', 'ENGINE_FABRIC']) expect(result.output).toContain(name);
    }, 30_000);

    it('refuses to start without Redis, saying so and how to start one', async () => {
      const result = await runUntilExit({
        ...block.env.serviceEnv,
        PORT: String(await freePort()),
        REDIS_URL: 'redis://127.0.0.1:1',
      });

      expect(result.code).not.toBe(0);
      expect(result.output).toMatch(/cannot reach redis/i);
      expect(result.output).toContain('127.0.0.1:1');
      expect(result.output).toContain('redis-server');
      expect(result.output).toContain('REDIS_URL');
    }, 30_000);

    it('exits with code 0 on SIGTERM', async () => {
      const other = await startService(block.env.serviceEnv);
      expect((await fetch(`${other.baseUrl}/health/ready`)).status).toBe(200);

      const code = await other.stop('SIGTERM');

      expect(code).toBe(0);
    }, 60_000);
  });
});
