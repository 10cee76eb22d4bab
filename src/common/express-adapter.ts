import { randomUUID } from 'node:crypto';
import { createServer, IncomingMessage, maxHeaderSize, ServerResponse, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { NestApplicationOptions } from '@nestjs/common';
import { ExpressAdapter } from '@nestjs/platform-express';
import type { Express } from 'express';
import { DomainError } from './problem.js';

/**
 * Nest's Express adapter with one change: the HTTP server builds each request and response on the Express
 * app's own prototypes (`app.request`, `app.response`).
 *
 * Express moves every request and response onto those prototypes with `Object.setPrototypeOf` as it takes
 * them. V8 then keeps such an object, and everything it reaches (the request's closures, headers, body
 * chunks), alive through young-generation collections until the next full one, so every request's garbage
 * was copied and promoted to the old heap: several MB per scavenge under load, a large share of an item
 * GET's CPU and pauses of milliseconds. Objects born with the prototype Express wants make its call a
 * no-op (V8 returns early when the prototype is unchanged), and the garbage dies young.
 */
export class PrototypedExpressAdapter extends ExpressAdapter {
  override initHttpServer(options: NestApplicationOptions): void {
    // Nest's own server set-up for these options is not repeated here; the service uses none of them.
    if (options.httpsOptions || options.forceCloseConnections || options.return503OnClosing) {
      throw new Error('PrototypedExpressAdapter supports plain HTTP servers only');
    }
    const app = this.getInstance<Express>();
    const server = createServer(
      {
        IncomingMessage: constructing<typeof IncomingMessage>(IncomingMessage, app.request),
        ServerResponse: constructing<typeof ServerResponse>(ServerResponse, app.response),
      },
      app,
    );
    server.on('clientError', answerUnparsed);
    this.setHttpServer(server);
  }
}

/**
 * Answers a request Node's HTTP parser refused, which never reaches Express, as every other error is answered: a
 * problem with an X-Request-Id. Node's own answer is a bare status line (431 for headers over its limit, 400 else).
 */
function answerUnparsed(error: Error & { code?: string }, socket: Duplex): void {
  // A connection reset or timed out mid-request has no one to answer.
  if (!error.code?.startsWith('HPE_') || !socket.writable) {
    socket.destroy();
    return;
  }
  const problem =
    error.code === 'HPE_HEADER_OVERFLOW'
      ? new DomainError('headers_too_large', `The request's header fields are over ${maxHeaderSize} bytes in all.`)
      : new DomainError('bad_request', 'The request is not valid HTTP/1.1.');
  const body = JSON.stringify(problem.toProblem());
  socket.end(
    [
      `HTTP/1.1 ${problem.status} ${STATUS_CODES[problem.status]}`,
      'Content-Type: application/problem+json',
      `Content-Length: ${Buffer.byteLength(body)}`,
      'X-Content-Type-Options: nosniff',
      `X-Request-Id: ${randomUUID()}`,
      'Connection: close',
      '',
      body,
    ].join('\r\n'),
  );
}

/**
 * A constructor Node's server can be given in place of `base` whose instances are built on `prototype`. Node's
 * IncomingMessage and ServerResponse are plain constructor functions, so `base` runs on the object `new`
 * made from `prototype`; `Reflect.construct(base, args, Prototyped)` would do the same, at a far higher cost per
 * request.
 */
function constructing<T extends abstract new (...args: never[]) => object>(base: T, prototype: object): T {
  function Prototyped(this: InstanceType<T>, ...args: ConstructorParameters<T>): void {
    (base as unknown as (...args: ConstructorParameters<T>) => void).call(this, ...args);
  }
  Prototyped.prototype = prototype;
  return Prototyped as unknown as T;
}
