import type { ServerResponse } from 'node:http';

/**
 * One Server-Sent Events answer (`text/event-stream`). Events are written as they come; a comment line every
 * `heartbeatMs` keeps proxies and load balancers from closing a quiet stream. `onClose` runs once, whoever closes it:
 * the client going away or `end()`.
 */
export class EventStream {
  private closed = false;
  private readonly heartbeat: NodeJS.Timeout;

  constructor(
    private readonly response: ServerResponse,
    heartbeatMs: number,
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
    response.once('close', () => {
      this.closed = true;
      clearInterval(this.heartbeat);
      onClose();
    });
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
}
