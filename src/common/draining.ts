import { setMaxListeners } from 'node:events';
import type { Server } from 'node:http';
import { type BeforeApplicationShutdown, Injectable, Logger, type OnModuleDestroy } from '@nestjs/common';
import { HttpAdapterHost } from '@nestjs/core';
import { AppConfig } from '../config/config.js';

/**
 * The process has begun to shut down: whatever holds a request open (an event stream, a `Prefer: wait`) answers now
 * instead of waiting for its event, so that the process can exit and the client go on with another replica.
 */
@Injectable()
export class Draining {
  private readonly controller = new AbortController();

  constructor() {
    // Every open event stream and held request listens, each until it is answered: a busy replica has thousands,
    // which are not the leak Node's warning past 10 listeners suspects.
    setMaxListeners(0, this.controller.signal);
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  begin(): void {
    this.controller.abort(new Error('shutting down'));
  }
}

/** How often idle kept-alive connections are closed while draining: a connection goes idle when its last answer ends. */
const IDLE_SWEEP_MS = 50;

/**
 * An API process's HTTP server on SIGTERM: it stops accepting connections, ends what holds requests open
 * ({@link Draining}), answers what is in flight with `Connection: close`, and closes connections as they go idle.
 * Whatever is still open after `SHUTDOWN_TIMEOUT_MS` is cut. Nest would otherwise wait for every open connection, and
 * an event stream never ends by itself.
 */
@Injectable()
export class HttpDrain implements OnModuleDestroy, BeforeApplicationShutdown {
  private readonly logger = new Logger(HttpDrain.name);
  private drained?: Promise<void>;

  constructor(
    private readonly adapter: HttpAdapterHost,
    private readonly draining: Draining,
    private readonly config: AppConfig,
  ) {}

  /** The first of Nest's shutdown hooks: draining starts at once, beside a worker's own (ROLE=all). */
  onModuleDestroy(): void {
    this.drained = this.drain();
  }

  /** Before Redis and the database close, which the last answers may still read. */
  async beforeApplicationShutdown(): Promise<void> {
    await this.drained;
  }

  private async drain(): Promise<void> {
    const server = this.adapter.httpAdapter?.getHttpServer() as Server | undefined;
    if (!server?.listening) return this.draining.begin();
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    // A request that arrives on a connection kept alive is still answered, and its connection closed after it.
    server.on('request', (_request, response: { setHeader(name: string, value: string): void }) =>
      response.setHeader('Connection', 'close'),
    );
    this.draining.begin();
    const sweep = setInterval(() => server.closeIdleConnections(), IDLE_SWEEP_MS);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>(
      (resolve) => (timer = setTimeout(resolve, this.config.shutdownTimeoutMs, true)),
    );
    try {
      if (await Promise.race([closed.then(() => false), timedOut])) {
        this.logger.warn(`connections still open after ${this.config.shutdownTimeoutMs} ms were closed`);
        server.closeAllConnections();
        await closed;
      }
    } finally {
      clearInterval(sweep);
      clearTimeout(timer);
    }
  }
}
