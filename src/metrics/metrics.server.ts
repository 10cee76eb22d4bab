import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Injectable, Logger, type OnApplicationBootstrap, type OnApplicationShutdown } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import { Metrics } from './metrics.js';

/**
 * Serves GET /metrics on METRICS_PORT, apart from the API: the public port never exposes it, and a scrape
 * neither passes the API's guards nor shows in its request metrics.
 */
@Injectable()
export class MetricsServer implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger(MetricsServer.name);
  private server?: Server;

  constructor(
    private readonly metrics: Metrics,
    private readonly config: AppConfig,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    if (this.config.metricsPort === 0) return;
    const server = createServer((request, response) => void this.answer(request, response));
    server.listen(this.config.metricsPort, this.config.host);
    try {
      await once(server, 'listening');
    } catch (error) {
      throw new Error(`METRICS_PORT ${this.config.metricsPort}: ${(error as Error).message}`, { cause: error });
    }
    this.server = server;
    this.logger.log(`Metrics on http://${this.config.host}:${this.config.metricsPort}/metrics`);
  }

  async onApplicationShutdown(): Promise<void> {
    if (!this.server) return;
    const closed = once(this.server, 'close');
    this.server.close();
    this.server.closeAllConnections();
    await closed;
  }

  private async answer(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (request.method !== 'GET' || request.url?.split('?')[0] !== '/metrics') {
      response.writeHead(404, { 'Content-Type': 'text/plain' }).end('Not found: metrics are at /metrics\n');
      return;
    }
    try {
      const body = await this.metrics.registry.metrics();
      response.writeHead(200, { 'Content-Type': this.metrics.registry.contentType }).end(body);
    } catch (error) {
      this.logger.warn({ err: error }, 'metrics could not be collected');
      response.writeHead(500, { 'Content-Type': 'text/plain' }).end('Metrics could not be collected\n');
    }
  }
}
