import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** How the server answers one path. */
export type ImageRoute =
  | { kind: 'bytes'; data: Buffer; contentType: string }
  /** A redirect to another path of this server. */
  | { kind: 'redirect'; to: string }
  | { kind: 'status'; status: number }
  /** Headers sent, then nothing: the client must give up on its own. */
  | { kind: 'stall' }
  /** `bytes` bytes of a real image's start and padding, chunked, with no Content-Length to refuse it by. */
  | { kind: 'endless'; data: Buffer; bytes: number };

/**
 * A loopback HTTP server of images, as a CDN or a shop's site would serve them to the service's URL inputs, with a path
 * for each way such a server fails. Counts the requests each path got.
 */
export class ImageServer {
  readonly requests = new Map<string, number>();
  private readonly routes = new Map<string, ImageRoute>();
  private readonly open = new Set<ServerResponse>();

  private constructor(private readonly server: Server) {
    server.on('request', (request: IncomingMessage, response: ServerResponse) => this.answer(request, response));
  }

  static async start(host = '127.0.0.1'): Promise<ImageServer> {
    const server = createServer();
    server.listen(0, host);
    await once(server, 'listening');
    return new ImageServer(server);
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  /** The absolute URL of `path` on this server, under `host` (an address or a name that resolves to loopback). */
  url(path: string, host = '127.0.0.1'): string {
    return `http://${host}:${this.port}${path}`;
  }

  route(path: string, route: ImageRoute): string {
    this.routes.set(path, route);
    return this.url(path);
  }

  async stop(): Promise<void> {
    for (const response of this.open) response.destroy();
    this.server.closeAllConnections();
    this.server.close();
    await once(this.server, 'close');
  }

  private answer(request: IncomingMessage, response: ServerResponse): void {
    const path = (request.url ?? '/').split('?')[0];
    this.requests.set(path, (this.requests.get(path) ?? 0) + 1);
    request.resume();
    const route = this.routes.get(path);
    if (!route) return void response.writeHead(404).end('not found');
    switch (route.kind) {
      case 'bytes':
        return void response
          .writeHead(200, { 'Content-Type': route.contentType, 'Content-Length': route.data.length })
          .end(route.data);
      case 'redirect':
        return void response.writeHead(302, { Location: route.to }).end();
      case 'status':
        return void response.writeHead(route.status).end();
      case 'stall':
        this.open.add(response);
        response.once('close', () => this.open.delete(response));
        response.writeHead(200, { 'Content-Type': 'image/jpeg' });
        return void response.flushHeaders();
      case 'endless': {
        response.writeHead(200, { 'Content-Type': 'image/jpeg' });
        let sent = 0;
        const chunk = Buffer.alloc(64 * 1024, 0x5a);
        const send = () => {
          while (sent < route.bytes) {
            const part = sent === 0 ? route.data : chunk;
            sent += part.length;
            if (!response.write(part)) return void response.once('drain', send);
          }
          response.end();
        };
        response.once('error', () => {});
        return send();
      }
    }
  }
}
