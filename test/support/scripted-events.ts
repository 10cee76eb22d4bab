import { once } from 'node:events';
import { type IncomingMessage, type ServerResponse, createServer, request as forward } from 'node:http';
import type { HistoryItem } from '../../client/src/index.js';

/**
 * An item event stream (`GET /user/generation-history/{id}/events`) whose events the test writes, framed as the
 * contract describes it and as the service writes it (src/common/event-stream.ts): `event: item`, `data:` the item as
 * JSON. Every other request goes to `otherwise`: an upstream base URL (the service, with its headers and its
 * Content-Security-Policy, forwarded unchanged) or a handler of the test's own. For tests of what a client does with
 * each event, not of the service.
 */
export interface ScriptedEvents {
  baseUrl: string;
  /** The next stream a client opens, once it has opened it. */
  nextStream(): Promise<ScriptedStream>;
  stop(): Promise<void>;
}

export interface ScriptedStream {
  /** The item id of the stream's path. */
  id: string;
  send(item: HistoryItem): void;
  /** Ends the stream, as the service does after a final item, or as a proxy that cuts it. */
  end(): void;
  /** Ends the stream as a replica shutting down does: `event: reconnect` after a `retry:` of `retryMs`. */
  reconnect(retryMs: number): void;
}

const EVENTS_PATH = /^\/user\/generation-history\/([^/]+)\/events$/;

export async function startScriptedEvents(
  otherwise: string | ((request: IncomingMessage, response: ServerResponse) => void),
): Promise<ScriptedEvents> {
  const opened: ScriptedStream[] = [];
  const waiting: ((stream: ScriptedStream) => void)[] = [];
  const server = createServer((request, response) => {
    const events = request.method === 'GET' ? EVENTS_PATH.exec((request.url ?? '/').split('?')[0]) : null;
    if (events) {
      response.writeHead(200, { 'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-cache' });
      response.flushHeaders();
      const stream: ScriptedStream = {
        id: events[1],
        send: (item) => void response.write(`event: item\ndata: ${JSON.stringify(item)}\n\n`),
        end: () => void response.end(),
        reconnect: (retryMs) => void response.end(`retry: ${retryMs}\nevent: reconnect\ndata: {}\n\n`),
      };
      const waiter = waiting.shift();
      if (waiter) waiter(stream);
      else opened.push(stream);
    } else if (typeof otherwise === 'string') {
      const upstream = forward(
        `${otherwise}${request.url}`,
        { method: request.method, headers: request.headers },
        (answer) => {
          response.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(response);
        },
      );
      upstream.on('error', (error) => response.writeHead(502).end(String(error)));
      request.pipe(upstream);
    } else {
      otherwise(request, response);
    }
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    nextStream: () =>
      new Promise((resolve) => {
        const stream = opened.shift();
        if (stream) resolve(stream);
        else waiting.push(resolve);
      }),
    stop: async () => {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}
