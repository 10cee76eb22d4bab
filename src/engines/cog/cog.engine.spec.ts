import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';

import sharp from 'sharp';

import { PermanentEngineError, type EngineRequest } from '../engine.js';
import { EngineTimeoutError, TransientEngineError } from '../engine.js';
import { CogEngine, buildPredictionBody } from './cog.engine.js';

interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

type Scenario = (request: RecordedRequest, res: ServerResponse) => void;

/** A fake Cog server: records every request, answers with the current scenario. */
class FakeCog {
  readonly requests: RecordedRequest[] = [];
  scenario: Scenario = (_request, res) => json(res, 500, { detail: 'no scenario' });
  private readonly server: Server;
  private arrivals: ((request: RecordedRequest) => void)[] = [];

  constructor() {
    this.server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const recorded: RecordedRequest = {
          method: req.method ?? '',
          url: req.url ?? '',
          headers: req.headers,
          body: Buffer.concat(chunks),
        };
        this.requests.push(recorded);
        for (const arrived of this.arrivals.splice(0)) arrived(recorded);
        this.scenario(recorded, res);
      });
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Resolves when the next request has been received in full. */
  nextRequest(): Promise<RecordedRequest> {
    return new Promise((resolve) => this.arrivals.push(resolve));
  }

  reset(): void {
    this.requests.length = 0;
    this.arrivals = [];
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve, reject) => this.server.close((error) => (error ? reject(error) : resolve())));
  }
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const payload = Buffer.from(JSON.stringify(body));
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': payload.length });
  res.end(payload);
}

function succeeded(output: unknown): Scenario {
  return (_request, res) => json(res, 200, { status: 'succeeded', output, error: null, logs: '' });
}

/** A small real image of one colour. */
function solid(width: number, height: number, background: string): ReturnType<typeof sharp> {
  return sharp({ create: { width, height, channels: 3, background } });
}

function dataUri(mime: string, bytes: Buffer): string {
  return `data:${mime};base64,${bytes.toString('base64')}`;
}

/** The error a promise rejects with (fails the test if it resolves). */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
}

function expectTransient(error: unknown): void {
  expect(error).toBeInstanceOf(TransientEngineError);
  expect(error).toBeInstanceOf(Error);
  expect(error).not.toBeInstanceOf(PermanentEngineError);
}

function expectPermanent(error: unknown, messagePart?: string | RegExp): void {
  expect(error).toBeInstanceOf(PermanentEngineError);
  expect((error as PermanentEngineError).code).toBe('engine_failed');
  if (messagePart) expect((error as Error).message).toMatch(messagePart);
}

describe('CogEngine', () => {
  const fake = new FakeCog();
  let baseUrl: string;
  let sut: CogEngine;
  let clothesPng: Buffer;
  let personJpeg: Buffer;
  let outputPng: Buffer;

  const request = (overrides: Partial<EngineRequest> = {}): EngineRequest => ({
    tool: 'fashion',
    generationType: 'fashion_swap',
    images: { clothes: clothesPng, person: personJpeg },
    texts: { prompt: 'a red dress' },
    ...overrides,
  });

  beforeAll(async () => {
    baseUrl = await fake.listen();
    clothesPng = await solid(8, 6, '#3366cc').png().toBuffer();
    personJpeg = await solid(6, 8, '#cc6633').jpeg().toBuffer();
    outputPng = await solid(5, 4, '#22aa44').png().toBuffer();
  });

  beforeEach(() => {
    fake.reset();
    sut = new CogEngine(baseUrl, { timeoutMs: 5000, maxOutputBytes: 1024 * 1024 });
  });

  afterAll(async () => {
    await fake.close();
  });

  describe('success', () => {
    it('sends images as data URIs and texts as strings, and returns a data-URI output', async () => {
      fake.scenario = succeeded(dataUri('image/png', outputPng));

      const result = await sut.generate(request());

      expect(result.kind).toBe('encoded');
      expect(result.data.equals(outputPng)).toBe(true);
      const { data, info } = await sharp(result.data).raw().toBuffer({ resolveWithObject: true });
      expect([info.width, info.height]).toEqual([5, 4]);
      expect([...data.subarray(0, 3)]).toEqual([0x22, 0xaa, 0x44]);

      expect(fake.requests).toHaveLength(1);
      const [sent] = fake.requests;
      expect(sent.method).toBe('POST');
      expect(sent.url).toBe('/predictions');
      expect(sent.headers['content-type']).toBe('application/json');
      expect(sent.headers['prefer']).toBe('wait');
      const body = JSON.parse(sent.body.toString('utf8')) as { input: Record<string, string> };
      expect(body.input.clothes).toBe(`data:image/png;base64,${clothesPng.toString('base64')}`);
      expect(body.input.person).toBe(`data:image/jpeg;base64,${personJpeg.toString('base64')}`);
      expect(body.input.prompt).toBe('a red dress');
      expect(body.input.generation_type).toBe('fashion_swap');
      expect(Object.keys(body)).toEqual(['input']);
    });

    it('downloads an http URL output from the same server', async () => {
      fake.scenario = (recorded, res) => {
        if (recorded.url === '/outputs/result.png') {
          res.writeHead(200, { 'Content-Type': 'image/png', 'Content-Length': outputPng.length });
          res.end(outputPng);
        } else {
          json(res, 200, { status: 'succeeded', output: `${baseUrl}/outputs/result.png` });
        }
      };

      const result = await sut.generate(request());

      expect(result).toEqual({ kind: 'encoded', data: outputPng });
      const calls = fake.requests.map((r) => `${r.method} ${r.url}`);
      expect(calls).toEqual(['POST /predictions', 'GET /outputs/result.png']);
    });

    it('takes the first item of an array output', async () => {
      const second = await solid(2, 2, '#000000').webp().toBuffer();
      fake.scenario = succeeded([dataUri('image/png', outputPng), dataUri('image/webp', second)]);

      const result = await sut.generate(request());

      expect(result).toEqual({ kind: 'encoded', data: outputPng });
    });

    it('accepts a WebP output and a base URL with a trailing slash', async () => {
      const webp = await solid(3, 3, '#ffffff').webp().toBuffer();
      fake.scenario = succeeded(dataUri('image/webp', webp));
      sut = new CogEngine(`${baseUrl}/`, { timeoutMs: 5000, maxOutputBytes: 1024 * 1024 });

      const result = await sut.generate(request({ images: { image: webp }, texts: {} }));

      expect(result).toEqual({ kind: 'encoded', data: webp });
      expect(fake.requests[0].url).toBe('/predictions');
      const body = JSON.parse(fake.requests[0].body.toString('utf8')) as { input: Record<string, string> };
      expect(body.input.image).toBe(dataUri('image/webp', webp));
    });
  });

  describe('transient failures', () => {
    it('times out when the server never answers', async () => {
      fake.scenario = () => undefined;
      sut = new CogEngine(baseUrl, { timeoutMs: 300, maxOutputBytes: 1024 * 1024 });

      const error = await rejection(sut.generate(request()));

      expectTransient(error);
      expect(error).toBeInstanceOf(EngineTimeoutError);
    });

    it('maps connection refused', async () => {
      const closed = createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const { port } = closed.address() as AddressInfo;
      await new Promise<void>((resolve) => closed.close(() => resolve()));
      sut = new CogEngine(`http://127.0.0.1:${port}`, { timeoutMs: 5000, maxOutputBytes: 1024 });

      const error = await rejection(sut.generate(request()));

      expectTransient(error);
      expect((error as Error).message).toMatch(/ECONNREFUSED/);
    });

    it('maps a connection reset', async () => {
      fake.scenario = (_recorded, res) => res.socket?.destroy();

      expectTransient(await rejection(sut.generate(request())));
    });

    it.each([500, 503, 409, 429])('maps HTTP %i', async (status) => {
      fake.scenario = (_recorded, res) => json(res, status, { detail: 'busy' });

      const error = await rejection(sut.generate(request()));

      expectTransient(error);
      expect((error as Error).message).toContain(`HTTP ${status}`);
    });

    it('maps a 5xx on the output download', async () => {
      fake.scenario = (recorded, res) => {
        if (recorded.method === 'GET') json(res, 502, {});
        else json(res, 200, { status: 'succeeded', output: `${baseUrl}/outputs/x.png` });
      };

      expectTransient(await rejection(sut.generate(request())));
    });
  });

  describe('permanent failures', () => {
    it('maps HTTP 422 without echoing the input', async () => {
      fake.scenario = (recorded, res) => {
        const input = (JSON.parse(recorded.body.toString('utf8')) as { input: Record<string, string> }).input;
        const loc = ['body', 'input', 'clothes'];
        json(res, 422, { detail: [{ type: 'value_error', loc, msg: 'Value error, bad image', input: input.clothes }] });
      };

      const error = await rejection(sut.generate(request()));

      expectPermanent(error, /HTTP 422.*input\.clothes: Value error, bad image/);
      expect((error as Error).message).not.toContain(clothesPng.toString('base64').slice(0, 24));
    });

    it('maps HTTP 404 on the output download', async () => {
      fake.scenario = (recorded, res) => {
        if (recorded.method === 'GET') json(res, 404, { detail: 'Not Found' });
        else json(res, 200, { status: 'succeeded', output: `${baseUrl}/outputs/gone.png` });
      };

      expectPermanent(await rejection(sut.generate(request())), /HTTP 404/);
    });

    it('reports a failed prediction with the model error, truncated and without image bytes', async () => {
      const longTail = 'x'.repeat(2000);
      fake.scenario = (_recorded, res) =>
        json(res, 200, {
          status: 'failed',
          output: null,
          error: `CUDA out of memory while reading ${dataUri('image/png', outputPng)} ${longTail}`,
        });

      const error = await rejection(sut.generate(request()));

      expectPermanent(error, /^Cog prediction failed: CUDA out of memory/);
      const message = (error as Error).message;
      expect(message.length).toBeLessThan(400);
      expect(message).not.toContain(outputPng.toString('base64').slice(0, 24));
    });

    it('reports a canceled prediction', async () => {
      fake.scenario = (_recorded, res) => json(res, 200, { status: 'canceled', output: null });

      expectPermanent(await rejection(sut.generate(request())), /canceled/);
    });

    const answer = (status: number, body: unknown) => (res: ServerResponse) => json(res, status, body);
    it.each([
      ['a non-JSON answer', (res: ServerResponse) => res.end('<html>oops</html>'), /not JSON/],
      ['a JSON answer that is not an object', answer(200, ['succeeded']), /not a JSON object/],
      ['a null output', answer(200, { status: 'succeeded', output: null }), /without an image output/],
      ['an empty array output', answer(200, { status: 'succeeded', output: [] }), /without an image output/],
      ['an object output', answer(200, { status: 'succeeded', output: { a: 1 } }), /without an image output/],
      ['a plain-text output', answer(200, { status: 'succeeded', output: 'hello' }), /neither a data URI nor/],
      ['an ftp output', answer(200, { status: 'succeeded', output: 'ftp://x/y.png' }), /neither a data URI nor/],
      ['a non-base64 data URI', answer(200, { status: 'succeeded', output: 'data:image/png,abc' }), /not base64/],
      ['a prediction still processing', answer(202, { status: 'processing' }), /status 'processing'/],
    ])('rejects %s', async (_name, answer, message) => {
      fake.scenario = (_recorded, res) => answer(res);

      expectPermanent(await rejection(sut.generate(request())), message);
    });

    it('rejects an output that is not an image', async () => {
      fake.scenario = succeeded(dataUri('image/png', Buffer.from('definitely not a png')));

      expectPermanent(await rejection(sut.generate(request())), /not an image/);
    });

    it('rejects a downloaded output that is not an image', async () => {
      fake.scenario = (recorded, res) => {
        if (recorded.method === 'GET') {
          res.writeHead(200, { 'Content-Type': 'text/html' });
          res.end('<html>login required</html>');
        } else {
          json(res, 200, { status: 'succeeded', output: [`${baseUrl}/outputs/page.html`] });
        }
      };

      expectPermanent(await rejection(sut.generate(request())), /not an image/);
    });

    it('rejects an image in another format', async () => {
      const gif = await solid(2, 2, '#000000').gif().toBuffer();
      fake.scenario = succeeded(dataUri('image/gif', gif));

      expectPermanent(await rejection(sut.generate(request())), /gif image, expected JPEG, PNG or WebP/);
    });

    it('rejects an oversize data-URI output', async () => {
      fake.scenario = succeeded(dataUri('image/png', outputPng));
      sut = new CogEngine(baseUrl, { timeoutMs: 5000, maxOutputBytes: outputPng.length - 1 });

      expectPermanent(await rejection(sut.generate(request())), /larger than/);
    });

    it.each([
      ['with', true],
      ['without', false],
    ])('rejects an oversize downloaded output (%s Content-Length)', async (_name, withLength) => {
      fake.scenario = (recorded, res) => {
        if (recorded.method === 'GET') {
          res.writeHead(200, withLength ? { 'Content-Length': outputPng.length } : {});
          res.write(outputPng.subarray(0, 10));
          res.end(outputPng.subarray(10));
        } else {
          json(res, 200, { status: 'succeeded', output: `${baseUrl}/outputs/big.png` });
        }
      };
      sut = new CogEngine(baseUrl, { timeoutMs: 5000, maxOutputBytes: outputPng.length - 1 });

      expectPermanent(await rejection(sut.generate(request())), /larger than/);
    });

    it('rejects an input image of an unknown type before sending anything', async () => {
      const error = await rejection(sut.generate(request({ images: { clothes: Buffer.from('GIF89a....') } })));

      expect(error).toBeInstanceOf(PermanentEngineError);
      expect((error as PermanentEngineError).code).toBe('invalid_image');
      expect(fake.requests).toHaveLength(0);
    });
  });

  describe('caller abort', () => {
    it('rejects with the abort reason while the prediction runs', async () => {
      fake.scenario = () => undefined;
      const controller = new AbortController();
      const reason = new Error('job deleted');
      const arrived = fake.nextRequest();

      const pending = rejection(sut.generate(request({ signal: controller.signal })));
      await arrived;
      controller.abort(reason);

      expect(await pending).toBe(reason);
    });

    it('rejects with the abort reason while the output downloads', async () => {
      const controller = new AbortController();
      const reason = new Error('shutting down');
      fake.scenario = (recorded, res) => {
        if (recorded.method === 'GET') controller.abort(reason);
        else json(res, 200, { status: 'succeeded', output: `${baseUrl}/outputs/slow.png` });
      };

      expect(await rejection(sut.generate(request({ signal: controller.signal })))).toBe(reason);
    });

    it('sends nothing when already aborted', async () => {
      const controller = new AbortController();
      const reason = new Error('already gone');
      controller.abort(reason);

      expect(await rejection(sut.generate(request({ signal: controller.signal })))).toBe(reason);
      expect(fake.requests).toHaveLength(0);
    });
  });
});

describe('buildPredictionBody', () => {
  it('writes valid JSON whatever the image length modulo 3, escaping names and texts', () => {
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    for (const extra of [0, 1, 2, 3 * 64 * 1024 + 1]) {
      const image = Buffer.concat([png, Buffer.alloc(extra, 7)]);
      const body = buildPredictionBody({
        generationType: 'type "x"',
        images: { 'we"ird': image },
        texts: { prompt: 'line\nbreak é ✓' },
      });
      expect(JSON.parse(body.toString('utf8'))).toEqual({
        input: { generation_type: 'type "x"', prompt: 'line\nbreak é ✓', 'we"ird': dataUri('image/png', image) },
      });
    }
  });

  it('refuses an input name given twice', () => {
    expect(() => buildPredictionBody({ generationType: 'a', images: {}, texts: { generation_type: 'b' } })).toThrow(
      PermanentEngineError,
    );
  });
});
