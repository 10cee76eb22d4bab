/**
 * A stand-in for a model served by Cog's HTTP server, written from replicate/cog (current `main`, the Rust coglet
 * server that `python/cog/server/http.py` now starts):
 * - `docs/http.md`: the endpoints, synchronous vs `Prefer: respond-async`, `PUT /predictions/{id}` idempotent,
 *   `POST /predictions/{id}/cancel` (200 `{}`, or 404), `GET /health-check` (always 200; READY, BUSY...), 409 when
 *   every prediction slot is in use.
 * - `crates/coglet/src/transport/http/routes.rs`: the routes, the answers' shapes (`{id, output, logs, status,
 *   metrics}` for a synchronous prediction; 200 with `status: failed` and `error` for the model's failure; 200 with
 *   `status: canceled`; 202 with the running prediction's state, input included, for a repeated PUT of a running
 *   id; 409 `{error, status: failed}` at capacity; 422 `{detail: [{loc, msg, type}]}` for an invalid input), a
 *   synchronous prediction canceled when its client disconnects (`SyncPredictionGuard`), and axum's `Json`
 *   extractor's content type rule (no Content-Type: no body read; another type: 415; bad JSON: 400).
 * - `crates/coglet/src/input_validation.rs`: unknown input names dropped silently, then the input checked against
 *   `components.schemas.Input` (`Field required` / `value_error.missing`, type and enum errors as `value_error`).
 * - `crates/coglet/src/prediction.rs` (`build_state_snapshot`) and `crates/coglet/src/health.rs`.
 *
 * Switches for each way the real one fails: the model's error, an HTTP status, a slow run, a run that never ends
 * (until canceled), a dropped connection, a schema that fails or never comes, and the server down (`close()`). It records every HTTP call, every
 * prediction (inputs by the model's names, images by sha256), every cancel received and how each prediction ended.
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CATALOG } from '../../src/catalog/catalog.js';
import { makeImage } from './jobs.js';

/** What the fake does with one new prediction. */
export type FakeCogAnswer =
  /**
   * Runs `delayMs`, then succeeds with `image` (by default a PNG whose colour changes with every answer), given as a
   * data URI, as a URL on the fake (`--upload-url` style), as a list of one data URI, or as the URL given (the image
   * kept at the fake's own URL for it all the same, `/outputs/<prediction id>.png`). The fake's `/redirect?to=<url>`
   * answers 302 to that URL.
   */
  | {
      kind: 'succeed';
      delayMs?: number;
      image?: Buffer;
      as?: 'data-uri' | 'url' | 'list' | { url: string };
      /**
       * With `list`, how many images the list holds (default 1), each of its own colour: what Cog answers for a model
       * whose `predict` returns `List[Path]` (docs/python.md, "lists ... of those types"), each item a data URI.
       */
      count?: number;
      /** Holds the run until this settles, then runs `delayMs`: for a test to decide when a model finishes. */
      until?: Promise<unknown>;
    }
  /** Runs `delayMs`, then the model raises: `status: failed` with `error`. */
  | { kind: 'fail'; error: string; delayMs?: number }
  /** Answers that HTTP status with a JSON `{detail}` body after `delayMs`, without running the model. */
  | { kind: 'http'; status: number; delayMs?: number }
  /** Runs until canceled (a cancel request, or its synchronous client going away) or the fake is closed. */
  | { kind: 'hang' }
  /** Drops the connection without an answer. */
  | { kind: 'drop' };

/** One prediction the fake started (or answered with `http`/`drop` instead). */
export interface FakeCogRequest {
  /** 1-based, in arrival order over the fake's life. */
  seq: number;
  /** The prediction id: the PUT's path, or one the fake made up for a POST without `id`. */
  id: string;
  method: 'PUT' | 'POST';
  /** 1-based count of predictions seen so far with the same images: which attempt of one job this is. */
  attempt: number;
  /** The `generation_type` input, if sent. */
  generationType: unknown;
  /** sha256 (hex) of each image input's decoded bytes, by the model's input name (after unknown names are dropped). */
  images: Record<string, string>;
  /** Every other input by the model's name, `generation_type` aside. */
  texts: Record<string, unknown>;
  /** Input names the fake dropped because its schema does not have them, as Cog does. */
  dropped: string[];
  /** Repeated PUTs of this id while it ran, answered with its state. */
  repeats: number;
  /** The fake sent the final answer. */
  answered: boolean;
  /** The synchronous client went away before the answer was sent. */
  aborted: boolean;
  /** A cancel request for this id arrived while it ran. */
  canceled: boolean;
  /** How it ended, once it has. */
  status: 'processing' | 'succeeded' | 'failed' | 'canceled';
  /** sha256 of the output image, once succeeded. */
  output?: string;
}

/** One HTTP request the fake received, whatever it was. */
export interface FakeCogCall {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  /** The status the fake answered, once it has. */
  status?: number;
}

export type FakeCogBehaviour = (request: FakeCogRequest) => FakeCogAnswer;

/** One input of the model's schema (`components.schemas.Input.properties`). */
export interface FakeCogProperty {
  type?: 'string' | 'integer' | 'number' | 'boolean';
  format?: string;
  enum?: unknown[];
  default?: unknown;
  description?: string;
}

export interface FakeCogSchema {
  properties: Record<string, FakeCogProperty>;
  required?: string[];
}

export interface FakeCogOptions {
  /** The model's inputs. Default: every input name of every tool in the catalog, and `generation_type`; none required. */
  schema?: FakeCogSchema;
  /** Predictions at once (`@cog.concurrent(max=N)`); default 1, as Cog. */
  concurrency?: number;
  /**
   * Where it listens: default 127.0.0.1 on a free port. Another loopback address (127.0.0.2) on one port for every
   * fake stands for the servers one DNS name resolves to.
   */
  host?: string;
  port?: number;
}

export interface FakeCog {
  /** Base URL, as `ENGINE_<TOOL>=cog:<url>` or a routing file's `url` expects it. */
  url: string;
  /** Predictions it runs at once. */
  concurrency: number;
  requests: FakeCogRequest[];
  calls: FakeCogCall[];
  /** Ids named by the cancel requests received, in order (whether or not a prediction had that id). */
  cancels: string[];
  /** Replaces what the fake does with the predictions that start from now on. */
  behave(behaviour: FakeCogBehaviour): void;
  /** Replaces the model's input schema. */
  setSchema(schema: FakeCogSchema): void;
  /** Makes `GET /openapi.json` answer this status, or never answer (`hang`), or the schema again (`undefined`). */
  failSchema(status: number | 'hang' | undefined): void;
  /** The predictions whose inputs include an image with exactly these bytes. */
  requestsFor(image: Buffer): FakeCogRequest[];
  /** The bytes of an image received, by the sha256 a request's `images` names it by. */
  imageOf(digest: string): Buffer | undefined;
  /** Predictions still running, their client still there. */
  inFlight(): FakeCogRequest[];
  /** Resolves once `predicate` holds, polling; rejects after `timeoutMs`. */
  waitFor(predicate: (fake: FakeCog) => boolean, what: string, timeoutMs?: number): Promise<void>;
  /** The server down: connections closed, nothing listening. */
  close(): Promise<void>;
}

export function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Every tool input name of the catalog and `generation_type`, as a model built for the shortcut would take them. */
function catalogSchema(): FakeCogSchema {
  const properties: Record<string, FakeCogProperty> = { generation_type: { type: 'string' } };
  for (const tool of CATALOG) {
    for (const input of tool.inputs) {
      properties[input.name] = input.kind === 'image' ? { type: 'string', format: 'uri' } : { type: 'string' };
    }
  }
  return { properties };
}

/** A running prediction: its record, how to end it, and its synchronous answer's response if any. */
interface Running {
  record: FakeCogRequest;
  input: Record<string, unknown>;
  end: (status: 'canceled') => void;
}

const JSON_TYPE = { 'Content-Type': 'application/json' };
/** From a cancel request to the prediction's end. */
const CANCEL_TAKES_MS = 50;

export async function startFakeCog(
  behaviour: FakeCogBehaviour = () => ({ kind: 'succeed' }),
  options: FakeCogOptions = {},
): Promise<FakeCog> {
  let current = behaviour;
  let schema = options.schema ?? catalogSchema();
  let schemaFailure: number | 'hang' | undefined;
  let isClosed = false;
  const concurrency = options.concurrency ?? 1;
  const requests: FakeCogRequest[] = [];
  const received = new Map<string, Buffer>();
  const calls: FakeCogCall[] = [];
  const cancels: string[] = [];
  const attempts = new Map<string, number>();
  const running = new Map<string, Running>();
  const outputs = new Map<string, Buffer>();
  const timers = new Set<NodeJS.Timeout>();
  let answers = 0;
  let generatedIds = 0;

  function send(response: ServerResponse, call: FakeCogCall, status: number, body: unknown): void {
    call.status = status;
    if (response.destroyed) return;
    response.writeHead(status, JSON_TYPE).end(JSON.stringify(body));
  }

  function later(ms: number, action: () => void): void {
    if (isClosed) return;
    const timer = setTimeout(() => {
      timers.delete(timer);
      action();
    }, ms);
    timers.add(timer);
  }

  async function readJson(
    request: IncomingMessage,
    response: ServerResponse,
    call: FakeCogCall,
  ): Promise<{ ok: true; body: Record<string, unknown> } | { ok: false }> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const type = request.headers['content-type'];
    // axum's Option<Json<_>>: no Content-Type, no body; a Content-Type that is not JSON, 415.
    if (type === undefined) return { ok: true, body: {} };
    const mime = type.split(';')[0].trim().toLowerCase();
    if (mime !== 'application/json' && !/^application\/[^/]+\+json$/.test(mime)) {
      call.status = 415;
      response
        .writeHead(415, { 'Content-Type': 'text/plain' })
        .end('Expected request with `Content-Type: application/json`');
      return { ok: false };
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch (error) {
      call.status = 400;
      response
        .writeHead(400, { 'Content-Type': 'text/plain' })
        .end(`Failed to parse the request body as JSON: ${(error as Error).message}`);
      return { ok: false };
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      call.status = 422;
      response
        .writeHead(422, { 'Content-Type': 'text/plain' })
        .end(
          'Failed to deserialize the JSON body into the target type: invalid type, expected struct PredictionRequest',
        );
      return { ok: false };
    }
    return { ok: true, body: parsed as Record<string, unknown> };
  }

  /** Drops unknown names in place; the pydantic-style `detail` entries for what is left, as coglet checks it. */
  function validate(input: Record<string, unknown>): { dropped: string[]; errors: unknown[] } {
    const dropped = Object.keys(input).filter((name) => !(name in schema.properties));
    for (const name of dropped) delete input[name];
    const errors: unknown[] = [];
    for (const name of schema.required ?? []) {
      if (!(name in input))
        errors.push({ loc: ['body', 'input', name], msg: 'Field required', type: 'value_error.missing' });
    }
    for (const [name, value] of Object.entries(input)) {
      const property = schema.properties[name];
      const shown = JSON.stringify(value);
      const typeOk =
        property.type === undefined ||
        (property.type === 'string' && typeof value === 'string') ||
        (property.type === 'number' && typeof value === 'number') ||
        (property.type === 'integer' && Number.isInteger(value)) ||
        (property.type === 'boolean' && typeof value === 'boolean');
      if (!typeOk) {
        errors.push({
          loc: ['body', 'input', name],
          msg: `${shown} is not of type "${property.type}"`,
          type: 'value_error',
        });
      } else if (property.enum && !property.enum.some((allowed) => JSON.stringify(allowed) === shown)) {
        const allowed = JSON.stringify(property.enum);
        errors.push({ loc: ['body', 'input', name], msg: `${shown} is not one of ${allowed}`, type: 'value_error' });
      }
    }
    return { dropped, errors };
  }

  function recordOf(id: string, method: 'PUT' | 'POST', input: Record<string, unknown>, dropped: string[]) {
    const images: Record<string, string> = {};
    const texts: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(input)) {
      if (name === 'generation_type') continue;
      const dataUri = typeof value === 'string' ? /^data:[^,]*;base64,(.*)$/s.exec(value) : null;
      if (dataUri) {
        const data = Buffer.from(dataUri[1], 'base64');
        images[name] = sha256(data);
        received.set(images[name], data);
      } else texts[name] = value;
    }
    const signature = JSON.stringify(Object.entries(images).sort());
    const attempt = (attempts.get(signature) ?? 0) + 1;
    attempts.set(signature, attempt);
    const record: FakeCogRequest = {
      seq: requests.length + 1,
      id,
      method,
      attempt,
      generationType: input['generation_type'],
      images,
      texts,
      dropped,
      repeats: 0,
      answered: false,
      aborted: false,
      canceled: false,
      status: 'processing',
    };
    requests.push(record);
    return record;
  }

  /** A file input that is neither a data URI nor a URL fails when the model reads it: 422 with `error`. */
  function unreadableFile(input: Record<string, unknown>): string | undefined {
    for (const [name, value] of Object.entries(input)) {
      if (schema.properties[name]?.format !== 'uri' || typeof value !== 'string') continue;
      if (!/^data:[^,]*;base64,/s.test(value) && !/^https?:\/\//.test(value)) return `${name}: invalid file input`;
    }
    return undefined;
  }

  async function predict(
    request: IncomingMessage,
    response: ServerResponse,
    call: FakeCogCall,
    pathId: string | undefined,
  ): Promise<void> {
    const read = await readJson(request, response, call);
    if (!read.ok) return;
    const body = read.body;
    const bodyId = typeof body['id'] === 'string' ? body['id'] : undefined;
    if (pathId !== undefined && bodyId !== undefined && bodyId !== pathId) {
      const detail = [
        { loc: ['body', 'id'], msg: 'prediction ID must match the ID supplied in the URL', type: 'value_error' },
      ];
      return send(response, call, 422, { detail });
    }
    const id = pathId ?? bodyId ?? `pred_${(++generatedIds).toString(16)}`;
    const runningNow = pathId !== undefined ? running.get(id) : undefined;
    if (runningNow) {
      runningNow.record.repeats++;
      return send(response, call, 202, { ...snapshot(runningNow.record), input: runningNow.input });
    }
    const input =
      typeof body['input'] === 'object' && body['input'] !== null
        ? { ...(body['input'] as Record<string, unknown>) }
        : {};
    const { dropped, errors } = validate(input);
    if (errors.length > 0) return send(response, call, 422, { detail: errors });
    if (running.size >= concurrency) {
      return send(response, call, 409, { error: 'At capacity - all prediction slots busy', status: 'failed' });
    }

    const record = recordOf(id, pathId === undefined ? 'POST' : 'PUT', input, dropped);
    const answer = current(record);
    const sync = request.headers['prefer'] !== 'respond-async';
    if (answer.kind === 'drop') {
      record.aborted = true;
      call.status = 0;
      response.socket?.destroy();
      return;
    }
    let ended = false;
    // The synchronous client went away: Cog cancels its prediction.
    response.on('close', () => {
      if (!sync || record.answered) return;
      record.aborted = true;
      running.get(id)?.end('canceled');
    });
    if (answer.kind === 'http') {
      later(answer.delayMs ?? 0, () => {
        record.answered = true;
        send(response, call, answer.status, { detail: `fake failure ${answer.status}` });
      });
      return;
    }

    const started = Date.now();
    const finish = (final: Record<string, unknown>) => {
      if (ended) return;
      ended = true;
      running.delete(id);
      record.status = final['status'] as FakeCogRequest['status'];
      if (!sync || response.destroyed) return;
      record.answered = true;
      send(response, call, 200, {
        id,
        logs: '',
        ...final,
        metrics: { predict_time: (Date.now() - started) / 1000 },
      });
    };
    running.set(id, { record, input, end: (status) => finish({ status }) });
    if (!sync) send(response, call, 202, { id, status: 'starting' });
    if (answer.kind === 'hang') return;

    const badFile = unreadableFile(input);
    const held = answer.kind === 'succeed' ? answer.until : undefined;
    const afterHold = (action: () => void) => {
      const go = () => later(answer.delayMs ?? 0, action);
      if (held) void held.then(go, go);
      else go();
    };
    afterHold(() => {
      if (ended) return;
      if (badFile) {
        ended = true;
        running.delete(id);
        record.status = 'failed';
        record.answered = true;
        return send(response, call, 422, { id, error: badFile, logs: '', status: 'failed' });
      }
      if (answer.kind === 'fail') return finish({ status: 'failed', error: answer.error });
      void outputOf(answer).then(
        async (image) => {
          record.output = sha256(image);
          if (answer.as === 'list' && (answer.count ?? 1) > 1) {
            const more = [];
            for (let item = 1; item < answer.count!; item++) more.push(await outputOf(answer));
            const uris = [image, ...more].map((each) => `data:image/png;base64,${each.toString('base64')}`);
            return finish({ status: 'succeeded', output: uris });
          }
          finish({ status: 'succeeded', output: present(id, image, answer.as ?? 'data-uri') });
        },
        () => response.destroy(),
      );
    });
  }

  async function outputOf(answer: Extract<FakeCogAnswer, { kind: 'succeed' }>): Promise<Buffer> {
    if (answer.image) return answer.image;
    answers++;
    const colour = `#${(((answers * 2654435761) >>> 8) & 0xffffff).toString(16).padStart(6, '0')}`;
    return makeImage(256, 320, 'png', colour);
  }

  function present(id: string, image: Buffer, as: 'data-uri' | 'url' | 'list' | { url: string }): unknown {
    if (typeof as === 'object') {
      outputs.set(id, image);
      return as.url;
    }
    if (as === 'url') {
      outputs.set(id, image);
      return `${fake.url}/outputs/${encodeURIComponent(id)}.png`;
    }
    const uri = `data:image/png;base64,${image.toString('base64')}`;
    return as === 'list' ? [uri] : uri;
  }

  function snapshot(record: FakeCogRequest): Record<string, unknown> {
    return { id: record.id, status: record.status, logs: '', metrics: {} };
  }

  function openapi(): unknown {
    return {
      openapi: '3.0.2',
      info: { title: 'Cog', version: '0.1.0' },
      paths: {},
      components: {
        schemas: {
          Input: {
            type: 'object',
            title: 'Input',
            properties: schema.properties,
            ...(schema.required?.length ? { required: schema.required } : {}),
          },
          Output: { type: 'string', format: 'uri', title: 'Output' },
        },
      },
    };
  }

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const path = (request.url ?? '/').split('?')[0];
    const call: FakeCogCall = { method: request.method ?? '', path, headers: request.headers };
    calls.push(call);
    const method = request.method;
    const idMatch = /^\/predictions\/([^/]+)$/.exec(path);
    const cancelMatch = /^\/predictions\/([^/]+)\/cancel$/.exec(path);
    const outputMatch = /^\/outputs\/([^/]+)\.png$/.exec(path);

    if (path === '/health-check' && method === 'GET') {
      const status = running.size >= concurrency ? 'BUSY' : 'READY';
      return send(response, call, 200, {
        status,
        setup: {
          started_at: new Date(0).toISOString(),
          completed_at: new Date(0).toISOString(),
          status: 'succeeded',
          logs: '',
        },
        version: { coglet: '0.17.0', cog: '0.17.0', python: '3.12.0' },
      });
    }
    if (path === '/openapi.json' && method === 'GET') {
      if (schemaFailure === 'hang') return;
      if (schemaFailure !== undefined)
        return send(response, call, schemaFailure, { error: 'OpenAPI schema not available' });
      return send(response, call, 200, openapi());
    }
    if (path === '/predictions' && method === 'POST') return predict(request, response, call, undefined);
    if (idMatch && method === 'PUT') return predict(request, response, call, decodeURIComponent(idMatch[1]));
    if (cancelMatch && method === 'POST') {
      const id = decodeURIComponent(cancelMatch[1]);
      cancels.push(id);
      const target = running.get(id);
      if (!target) return send(response, call, 404, {});
      target.record.canceled = true;
      // The model stops once its worker has raised CancelationException, not at the cancel request itself.
      later(CANCEL_TAKES_MS, () => target.end('canceled'));
      return send(response, call, 200, {});
    }
    if (path === '/redirect' && method === 'GET') {
      const to = new URL(request.url ?? '/', fake.url).searchParams.get('to') ?? '';
      call.status = 302;
      response.writeHead(302, { Location: to }).end();
      return;
    }
    if (outputMatch && method === 'GET') {
      const image = outputs.get(decodeURIComponent(outputMatch[1]));
      if (!image) return send(response, call, 404, {});
      call.status = 200;
      response.writeHead(200, { 'Content-Type': 'image/png', 'Content-Length': image.length }).end(image);
      return;
    }
    const known =
      path === '/health-check' || path === '/openapi.json' || path === '/predictions' || idMatch || cancelMatch;
    call.status = known ? 405 : 404;
    response.writeHead(call.status).end();
  }

  const server: Server = createServer((request, response) => {
    handle(request, response).catch(() => response.destroy());
  });
  const host = options.host ?? '127.0.0.1';
  server.listen(options.port ?? 0, host);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  const fake: FakeCog = {
    url: `http://${host}:${port}`,
    concurrency,
    requests,
    calls,
    cancels,
    behave(next) {
      current = next;
    },
    setSchema(next) {
      schema = next;
    },
    failSchema(status) {
      schemaFailure = status;
    },
    requestsFor(image) {
      const digest = sha256(image);
      return requests.filter((request) => Object.values(request.images).includes(digest));
    },
    imageOf(digest) {
      return received.get(digest);
    },
    inFlight() {
      return requests.filter((request) => !request.answered && !request.aborted && request.status === 'processing');
    },
    async waitFor(predicate, what, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(fake)) {
        if (Date.now() > deadline) throw new Error(`fake Cog: still waiting for ${what} after ${timeoutMs} ms`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async close() {
      isClosed = true;
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
