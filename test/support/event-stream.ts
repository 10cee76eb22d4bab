/** Event streams (Server-Sent Events) of the service, read as a browser's EventSource reads them. */
import { bearer } from './client.js';

/** One Server-Sent Event as a client reads it. */
export interface StreamEvent {
  event: string;
  data: unknown;
}

/** An event stream read as a browser's EventSource would: events as they arrive, and when the server ends it. */
export interface OpenStream {
  status: number;
  contentType: string | null;
  events: StreamEvent[];
  comments: number;
  /** Resolves when the server has ended the stream. */
  ended: Promise<void>;
  close(): void;
}

export async function openStream(url: string, key: string): Promise<OpenStream> {
  const controller = new AbortController();
  const response = await fetch(url, { headers: bearer(key), signal: controller.signal });
  const stream: OpenStream = {
    status: response.status,
    contentType: response.headers.get('content-type'),
    events: [],
    comments: 0,
    ended: Promise.resolve(),
    close: () => controller.abort(),
  };
  if (!response.ok || !response.body) {
    await response.body?.cancel();
    return stream;
  }
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  stream.ended = (async () => {
    let buffer = '';
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        buffer += value;
        let end: number;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          if (block.startsWith(':')) {
            stream.comments++;
            continue;
          }
          const lines = Object.fromEntries(block.split('\n').map((line) => [line.slice(0, line.indexOf(':')), line]));
          stream.events.push({
            event: lines.event.slice('event: '.length),
            data: JSON.parse(lines.data.slice('data: '.length)),
          });
        }
      }
    } catch {
      // closed by the test
    }
  })();
  return stream;
}
