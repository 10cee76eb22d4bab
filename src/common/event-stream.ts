import type { ServerResponse } from 'node:http';

/**
 * Streams ended together by a shutdown are asked to come back spread over this long, not all at once to the replicas
 * left.
 */
const RECONNECT_SPREAD_MS = 1000;

/**
 * One Server-Sent Events answer (`text/event-stream`). Events are written as they come; a comment line every
 * `heartbeatMs` keeps proxies and load balancers from closing a quiet stream. When `draining` fires (the process is
 * shutting down), the stream ends with a `reconnect` event. Every `access.everyMs` the stream asks whether its
 * client may still read it, and ends if not (the client that reconnects is then refused); a check that fails keeps
 * it, as an outage should not end every stream at once. `onClose` runs once, whoever closes it: the client going
 * away, `end()`, the drain or the access check.
 */
export class EventStream {
  private closed = false;
  private readonly heartbeat: NodeJS.Timeout;
  private readonly accessCheck: NodeJS.Timeout;

  constructor(
    private readonly response: ServerResponse,
    heartbeatMs: number,
    draining: AbortSignal,
    access: { allowed: () => Promise<boolean>; everyMs: number },
    onClose: () => void,
  ) {
    response.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache, no-transform',
      // nginx buffers answers by default, which would hold events back until the stream ends.
      'X-Accel-Buffering': 'no',
    });
    response.flushHeaders();
    this.heartbeat = setInterval(() => this.comment('keep-alive'), heartbeatMs);
    this.accessCheck = setInterval(() => {
      access.allowed().then(
        (allowed) => allowed || this.end(),
        () => undefined,
      );
    }, access.everyMs);
    const reconnect = () => this.reconnect();
    draining.addEventListener('abort', reconnect, { once: true });
    response.once('close', () => {
      this.closed = true;
      clearInterval(this.heartbeat);
      clearInterval(this.accessCheck);
      draining.removeEventListener('abort', reconnect);
      onClose();
    });
    if (draining.aborted) this.reconnect();
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** A comment line: ignored by clients, it shows the stream is alive. */
  comment(text: string): void {
    if (!this.closed) this.response.write(`: ${text}\n\n`);
  }

  send(event: string, data: unknown): void {
    if (this.closed) return;
    this.response.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  end(): void {
    if (!this.closed) this.response.end();
  }

  /**
   * The last event of a stream this process will not keep: the client opens it again, after `retry` milliseconds (an
   * EventSource does so by itself), and reaches another replica. The connection closes with it, so that the new
   * request is not sent down it.
   */
  private reconnect(): void {
    if (this.closed) return;
    const retry = Math.floor(Math.random() * RECONNECT_SPREAD_MS);
    this.response.write(`retry: ${retry}\nevent: reconnect\ndata: {}\n\n`);
    const socket = this.response.socket;
    this.response.end(() => socket?.end());
  }
}
