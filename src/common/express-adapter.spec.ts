import { once } from 'node:events';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Express, Request, Response } from 'express';
import { PrototypedExpressAdapter } from './express-adapter.js';

describe('PrototypedExpressAdapter', () => {
  let adapter: PrototypedExpressAdapter;
  let server: Server;
  let baseUrl: string;

  beforeEach(async () => {
    adapter = new PrototypedExpressAdapter();
    adapter.initHttpServer({});
    server = adapter.getHttpServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  afterEach(async () => {
    server.closeAllConnections();
    server.close();
    await once(server, 'close');
  });

  it('builds requests and responses on the Express app prototypes before Express sees them', async () => {
    const app = adapter.getInstance<Express>();
    const seen: boolean[] = [];
    // Runs before Express's own listener: what Node built, before Express could move it onto its prototypes.
    server.prependListener('request', (request: IncomingMessage, response: ServerResponse) => {
      seen.push(Object.getPrototypeOf(request) === app.request, Object.getPrototypeOf(response) === app.response);
    });
    app.get('/answer', (request: Request, response: Response) => {
      response.json({ path: request.path, headers: request.get('x-probe') ?? null });
    });

    const answer = await fetch(`${baseUrl}/answer?x=1`, { headers: { 'X-Probe': 'yes' } });

    expect(seen).toEqual([true, true]);
    expect(answer.status).toBe(200);
    expect(await answer.json()).toEqual({ path: '/answer', headers: 'yes' });
  });

  it('refuses the server options it does not build (HTTPS, forced close, 503 on closing)', () => {
    expect(() => new PrototypedExpressAdapter().initHttpServer({ httpsOptions: {} })).toThrow(/plain HTTP/);
    expect(() => new PrototypedExpressAdapter().initHttpServer({ forceCloseConnections: true })).toThrow(/plain HTTP/);
    expect(() => new PrototypedExpressAdapter().initHttpServer({ return503OnClosing: true })).toThrow(/plain HTTP/);
  });
});
