import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Writable } from 'node:stream';
import { Logger } from '@nestjs/common';
import { pino } from 'pino';
import { abortFailedResponse, createRootLogger, JsonLogger, requestLogging } from './logging.js';

/** A pino logger at `level` whose lines are collected, parsed. */
function capture(level = 'trace') {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level }, stream), lines };
}

/** The request and response objects the middleware sees, enough of them for it. */
function exchange(url: string, headers: Record<string, string> = {}) {
  const request = { url, method: 'GET', headers } as unknown as IncomingMessage & { id?: string };
  const sent: Record<string, unknown> = {};
  const response = Object.assign(new EventEmitter(), {
    statusCode: 200,
    headersSent: false,
    writableFinished: false,
    setHeader: (name: string, value: unknown) => (sent[name.toLowerCase()] = value),
    getHeader: (name: string) => sent[name.toLowerCase()],
  });
  const finish = (statusCode: number) => {
    response.statusCode = statusCode;
    response.headersSent = true;
    response.writableFinished = true;
    response.emit('close');
  };
  return {
    request,
    response: response as unknown as ServerResponse,
    sent,
    finish,
    /** The connection gone before an answer was sent, with the status the handler had set, if any. */
    abort: (statusCode?: number) => {
      if (statusCode !== undefined) response.statusCode = statusCode;
      response.emit('close');
    },
  };
}

const flush = () => new Promise((resolve) => setImmediate(resolve));

describe('JsonLogger', () => {
  afterEach(() => Logger.overrideLogger(false));

  it("writes Nest's logger calls as JSON lines with the class as context", async () => {
    const { logger, lines } = capture();
    Logger.overrideLogger(new JsonLogger(logger));
    const sut = new Logger('Worker');

    sut.log('started');
    sut.warn({ id: 'a1', attempt: 2 }, 'job attempt failed');
    sut.verbose('details');
    await flush();

    expect(lines).toEqual([
      expect.objectContaining({ level: 30, context: 'Worker', msg: 'started' }),
      expect.objectContaining({ level: 40, context: 'Worker', id: 'a1', attempt: 2, msg: 'job attempt failed' }),
      expect.objectContaining({ level: 10, context: 'Worker', msg: 'details' }),
    ]);
  });

  it("keeps the stack of Nest's own (message, stack, context) errors", async () => {
    const { logger, lines } = capture();

    new JsonLogger(logger).error('boom', 'Error: boom\n    at handler (app.js:1:1)', 'ExceptionsHandler');
    await flush();

    expect(lines).toEqual([
      expect.objectContaining({
        level: 50,
        context: 'ExceptionsHandler',
        msg: 'boom',
        err: expect.objectContaining({ message: 'boom', stack: 'Error: boom\n    at handler (app.js:1:1)' }),
      }),
    ]);
  });

  it("logs Nest's start-up chatter (a line per module and route) at debug, not info", async () => {
    const { logger, lines } = capture('info');
    const sut = new JsonLogger(logger);

    sut.log('Mapped {/generation/tools, GET} route', 'RouterExplorer');
    sut.log('AppModule dependencies initialized', 'InstanceLoader');
    sut.log('Nest application successfully started', 'NestApplication');
    await flush();

    expect(lines.map((line) => line.msg)).toEqual(['Nest application successfully started']);
  });

  it('writes nothing below its level', async () => {
    const { logger, lines } = capture('warn');
    const sut = new JsonLogger(logger);

    sut.log('info line', 'Ctx');
    sut.debug({ id: 1 }, 'debug line', 'Ctx');
    await flush();

    expect(lines).toEqual([]);
  });
});

describe('requestLogging', () => {
  it('gives every request an id and logs its method, path and status once it is answered', async () => {
    const { logger, lines } = capture('info');
    const { request, response, sent, finish } = exchange('/user/generation-history?page=2');

    requestLogging(logger)(request, response, () => {});
    finish(200);
    await flush();

    expect(sent['x-request-id']).toEqual(request.id);
    expect(lines).toEqual([
      expect.objectContaining({
        level: 30,
        msg: 'request completed',
        req: { id: request.id, method: 'GET', url: '/user/generation-history' },
        res: { statusCode: 200 },
        responseTime: expect.any(Number),
      }),
    ]);
  });

  it("keeps a client's sane X-Request-Id and replaces one shaped like an API key", () => {
    const { logger } = capture('info');
    const sane = exchange('/generation/tools', { 'x-request-id': 'trace-42' });
    const keyLike = exchange('/generation/tools', { 'x-request-id': `igs_${'a'.repeat(40)}` });

    requestLogging(logger)(sane.request, sane.response, () => {});
    requestLogging(logger)(keyLike.request, keyLike.response, () => {});

    expect(sane.sent['x-request-id']).toBe('trace-42');
    expect(keyLike.sent['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('masks a key put into the path, and logs 5xx answers and answers the service failed to send as errors', async () => {
    const { logger, lines } = capture('info');
    const failed = exchange(`/user/generation-history/igs_${'b'.repeat(40)}`);
    const cutOff = exchange('/media/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44/stock.jpg');
    Object.assign(cutOff.response, { headersSent: true, destroy: () => cutOff.abort() });

    requestLogging(logger)(failed.request, failed.response, () => {});
    requestLogging(logger)(cutOff.request, cutOff.response, () => {});
    failed.finish(503);
    abortFailedResponse(cutOff.response);
    await flush();

    expect(lines).toEqual([
      expect.objectContaining({
        level: 50,
        msg: 'request completed',
        req: expect.objectContaining({ url: '/user/generation-history/igs_[masked]' }),
      }),
      expect.objectContaining({
        level: 50,
        msg: 'response failed',
        req: expect.objectContaining({ url: '/media/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44/stock.jpg' }),
        res: { statusCode: 200 },
      }),
    ]);
  });

  it('logs a client that went away before its answer was whole as a warning, not an error', async () => {
    const { logger, lines } = capture('info');
    const dropped = exchange('/generation/generate_image_v2/');

    requestLogging(logger)(dropped.request, dropped.response, () => {});
    dropped.abort(201);
    await flush();

    expect(lines).toEqual([
      expect.objectContaining({
        level: 40,
        msg: 'request aborted by the client',
        req: expect.objectContaining({ url: '/generation/generate_image_v2/' }),
      }),
    ]);
    expect(lines[0]).not.toHaveProperty('res');
  });

  it('logs an event stream its client closed as closed, not as an error', async () => {
    const { logger, lines } = capture('info');
    const stream = exchange('/user/events');

    requestLogging(logger)(stream.request, stream.response, () => {});
    stream.response.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
    stream.abort();
    await flush();

    expect(lines).toEqual([expect.objectContaining({ level: 30, msg: 'event stream closed' })]);
  });

  it('does not log health probes', async () => {
    const { logger, lines } = capture('info');
    const probe = exchange('/health/ready');

    requestLogging(logger)(probe.request, probe.response, () => {});
    probe.finish(200);
    await flush();

    expect(lines).toEqual([]);
  });
});

describe('createRootLogger', () => {
  /** What the logger writes, as text. */
  function sink() {
    let text = '';
    const stream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        text += chunk.toString();
        done();
      },
    });
    return { stream, text: () => text };
  }

  it.each([
    ['auto', false],
    ['json', true],
  ] as const)('writes JSON lines with LOG_FORMAT=%s and stdout a terminal: %s', async (logFormat, terminal) => {
    const { stream, text } = sink();
    const sut = createRootLogger({ logLevel: 'info', logFormat }, terminal, stream);

    sut.info({ context: 'Bootstrap' }, 'Serving role "all"');
    await flush();

    expect(JSON.parse(text())).toMatchObject({ level: 30, context: 'Bootstrap', msg: 'Serving role "all"' });
  });

  it.each([
    ['auto', true],
    ['pretty', false],
  ] as const)(
    'writes one readable line per event with LOG_FORMAT=%s and stdout a terminal: %s',
    async (logFormat, terminal) => {
      const { stream, text } = sink();
      const sut = createRootLogger({ logLevel: 'info', logFormat }, terminal, stream);

      sut.info({ context: 'Bootstrap' }, 'Serving role "all"');
      await flush();

      const plain = text().replace(new RegExp(`${String.fromCharCode(0x1b)}\\[[0-9;]*m`, 'g'), '');
      expect(plain).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: \[Bootstrap\] Serving role "all"\n$/);
    },
  );
});
