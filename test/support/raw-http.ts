import { connect } from 'node:net';

/** One HTTP response as it came off the socket. */
export interface RawResponse {
  status: number;
  headers: Headers;
  body: Buffer;
}

export interface RawExchange {
  /** Every complete response the server wrote, in order. */
  responses: RawResponse[];
  /** `server`: the server closed the connection; `client`: the wait ended first and the test closed it. */
  closedBy: 'server' | 'client';
}

export interface RawRequest {
  port: number;
  /** Written in order, `delayMs` apart: one chunk sends the request at once, many trickle it. */
  chunks: Buffer[];
  delayMs?: number;
  /** After the last chunk: `keep-open` waits with the socket open, `half-close` sends FIN (client done writing). */
  then: 'keep-open' | 'half-close';
  /** `response`: done at the first complete response; `close`: done when the server closes the connection. */
  until: 'response' | 'close';
  /** The longest wait after the last chunk before the test gives up and closes the socket itself. */
  waitMs: number;
}

/**
 * Sends bytes exactly as given over a plain TCP connection (no HTTP client in between to fix them up) and
 * collects what the server answers.
 */
export function rawExchange(request: RawRequest): Promise<RawExchange> {
  return new Promise((resolve) => {
    const socket = connect(request.port, '127.0.0.1');
    let received = Buffer.alloc(0);
    let finished = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (closedBy: RawExchange['closedBy']) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ responses: parseResponses(received, closedBy === 'server'), closedBy });
    };
    socket.on('error', () => finish('server'));
    socket.on('close', () => finish('server'));
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      if (request.until === 'response' && parseResponses(received, false).length > 0) finish('client');
    });
    const send = async () => {
      for (const [index, chunk] of request.chunks.entries()) {
        if (finished) return;
        if (index > 0 && request.delayMs) await new Promise((wait) => setTimeout(wait, request.delayMs));
        socket.write(chunk);
      }
      if (request.then === 'half-close') socket.end();
      timer = setTimeout(() => finish('client'), request.waitMs);
    };
    socket.once('connect', () => void send());
  });
}

/** Complete responses in `data`; a response without Content-Length runs to the end of a closed connection. */
function parseResponses(data: Buffer, connectionClosed: boolean): RawResponse[] {
  const responses: RawResponse[] = [];
  let offset = 0;
  while (offset < data.length) {
    const headEnd = data.indexOf('\r\n\r\n', offset);
    if (headEnd < 0) break;
    const [statusLine, ...headerLines] = data.subarray(offset, headEnd).toString('latin1').split('\r\n');
    const headers = new Headers();
    for (const line of headerLines) {
      const colon = line.indexOf(':');
      headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
    }
    const bodyStart = headEnd + 4;
    const length = headers.get('content-length');
    let bodyEnd: number;
    if (length !== null) bodyEnd = bodyStart + Number(length);
    else if (connectionClosed) bodyEnd = data.length;
    else break;
    if (bodyEnd > data.length) break;
    responses.push({ status: Number(statusLine.split(' ')[1]), headers, body: data.subarray(bodyStart, bodyEnd) });
    offset = bodyEnd;
  }
  return responses;
}

/** The request line and headers of a request, ready to be followed by its body. */
export function requestHead(method: string, path: string, headers: Record<string, string>): Buffer {
  const lines = [
    `${method} ${path} HTTP/1.1`,
    'Host: 127.0.0.1',
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
  ];
  return Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
}

/** A raw response as a fetch Response, for `expectMatchesContract`. */
export function asFetchResponse(response: RawResponse): Response {
  return new Response(response.status === 204 ? null : new Uint8Array(response.body), {
    status: response.status,
    headers: response.headers,
  });
}
