import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { makeImage } from './jobs.js';

/** What the fake does with one prediction request. */
export type FakeCogAnswer =
  /** 200 `{status: 'succeeded', output: 'data:image/png;base64,...'}` after `delayMs`. */
  | { kind: 'succeed'; delayMs?: number }
  /** That HTTP status with a JSON `{detail}` body, after `delayMs`. */
  | { kind: 'http'; status: number; delayMs?: number }
  /** Never answers (until the client gives up or the fake is closed). */
  | { kind: 'hang' };

/** One prediction request the fake received. */
export interface FakeCogRequest {
  /** 1-based, in arrival order over the fake's life. */
  seq: number;
  /** 1-based count of requests seen so far with the same inputs: which attempt of one job this is. */
  attempt: number;
  generationType: unknown;
  /** sha256 (hex) of each image input's decoded bytes, by input name. */
  images: Record<string, string>;
  texts: Record<string, unknown>;
  /** The fake sent its answer. */
  answered: boolean;
  /** The client went away before the answer was sent. */
  aborted: boolean;
}

export type FakeCogBehaviour = (request: FakeCogRequest) => FakeCogAnswer;

export interface FakeCog {
  /** Base URL, as `ENGINE_<TOOL>=cog:<url>` expects it. */
  url: string;
  requests: FakeCogRequest[];
  /** Replaces what the fake does with the requests that arrive from now on. */
  behave(behaviour: FakeCogBehaviour): void;
  /** The requests whose inputs include an image with exactly these bytes. */
  requestsFor(image: Buffer): FakeCogRequest[];
  /** Requests received and neither answered nor aborted. */
  inFlight(): FakeCogRequest[];
  /** Resolves once `predicate` holds, polling; rejects after `timeoutMs`. */
  waitFor(predicate: (fake: FakeCog) => boolean, what: string, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/**
 * A stand-in for a model served with Cog's HTTP API (`POST /predictions`, synchronous mode): it reads the
 * prediction input, records it, and answers as `behaviour` says. Successful answers carry a real PNG whose colour
 * changes with every answer, so two runs of one job give different bytes.
 */
export async function startFakeCog(behaviour: FakeCogBehaviour = () => ({ kind: 'succeed' })): Promise<FakeCog> {
  let current = behaviour;
  const requests: FakeCogRequest[] = [];
  const attempts = new Map<string, number>();
  const timers = new Set<NodeJS.Timeout>();
  let answers = 0;

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (request.method !== 'POST' || request.url !== '/predictions') {
      response.writeHead(404, { 'Content-Type': 'application/json' }).end('{"detail":"Not Found"}');
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    let input: Record<string, unknown>;
    try {
      input = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { input: Record<string, unknown> }).input;
    } catch {
      response.writeHead(400, { 'Content-Type': 'application/json' }).end('{"detail":"invalid JSON"}');
      return;
    }
    const images: Record<string, string> = {};
    const texts: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(input)) {
      if (name === 'generation_type') continue;
      const dataUri = typeof value === 'string' ? /^data:[^,]*;base64,(.*)$/s.exec(value) : null;
      if (dataUri) images[name] = sha256(Buffer.from(dataUri[1], 'base64'));
      else texts[name] = value;
    }
    const signature = JSON.stringify(Object.entries(images).sort());
    const attempt = (attempts.get(signature) ?? 0) + 1;
    attempts.set(signature, attempt);
    const record: FakeCogRequest = {
      seq: requests.length + 1,
      attempt,
      generationType: input['generation_type'],
      images,
      texts,
      answered: false,
      aborted: false,
    };
    requests.push(record);
    response.on('close', () => {
      if (!record.answered) record.aborted = true;
    });

    const answer = current(record);
    if (answer.kind === 'hang') return;
    const send = async (): Promise<void> => {
      if (record.aborted || response.destroyed) return;
      if (answer.kind === 'http') {
        record.answered = true;
        response
          .writeHead(answer.status, { 'Content-Type': 'application/json' })
          .end(JSON.stringify({ detail: `fake failure ${answer.status}` }));
        return;
      }
      answers++;
      const colour = `#${(((answers * 2654435761) >>> 8) & 0xffffff).toString(16).padStart(6, '0')}`;
      const png = await makeImage(256, 320, 'png', colour);
      if (record.aborted || response.destroyed) return;
      record.answered = true;
      response.writeHead(200, { 'Content-Type': 'application/json' }).end(
        JSON.stringify({
          id: `fake-${record.seq}`,
          status: 'succeeded',
          output: `data:image/png;base64,${png.toString('base64')}`,
        }),
      );
    };
    const delay = answer.delayMs ?? 0;
    if (delay <= 0) return send();
    const timer = setTimeout(() => {
      timers.delete(timer);
      void send().catch(() => response.destroy());
    }, delay);
    timers.add(timer);
  }

  const server: Server = createServer((request, response) => {
    handle(request, response).catch(() => response.destroy());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  const fake: FakeCog = {
    url: `http://127.0.0.1:${port}`,
    requests,
    behave(next) {
      current = next;
    },
    requestsFor(image) {
      const digest = sha256(image);
      return requests.filter((request) => Object.values(request.images).includes(digest));
    },
    inFlight() {
      return requests.filter((request) => !request.answered && !request.aborted);
    },
    async waitFor(predicate, what, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(fake)) {
        if (Date.now() > deadline) throw new Error(`fake Cog: still waiting for ${what} after ${timeoutMs} ms`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async close() {
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      const closed = once(server, 'close');
      server.close();
      server.closeAllConnections();
      await closed;
    },
  };
  return fake;
}
