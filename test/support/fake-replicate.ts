/**
 * A stand-in for Replicate's HTTP API, written from its published OpenAPI document (committed as
 * `test/fixtures/replicate/openapi.json`: `predictions.create`, `models.predictions.create`, `predictions.get`,
 * `predictions.cancel`, `files.create`/`get`/`delete`, `account.get`, the `Prefer` header, `schemas_prediction_request`,
 * `schemas_version_prediction_request`, `schemas_prediction_response`, `schemas_file_response`) and from the official
 * client `replicate` 1.4.0 (`index.js` `request()`, `lib/predictions.js`, `lib/files.js`, `lib/util.js`; its tests'
 * problem bodies `{detail, status}`). Paths are served under `/v1`, as on api.replicate.com.
 *
 * Strict like the real one: a bearer token is required (401), JSON bodies must say `application/json` (415) and hold
 * no unknown field (422), an unknown model or a community model by name is 404, an unknown version 422. A model input
 * the model does not have is dropped without a word, as Replicate has always done (cog #2943 made Cog do the same).
 * `models.get` and `models.versions.get` answer each model's input schema (`components.schemas.Input` of the Cog
 * model's OpenAPI document, as in a version's `openapi_schema`). A prediction moves from
 * `starting` to `processing` (tqdm lines with growing percentages in `logs`) to `succeeded`, its output a PNG served
 * at `<publicUrl>/outputs/<id>.png`. `Prefer: wait=N` holds the creation's answer until the prediction is final or N
 * seconds have passed. Switches: a model that fails, answers of a given status (5xx, 429 with Retry-After), slow
 * answers, a server that is down (connections dropped).
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { makeImage } from './jobs.js';

/** How one prediction runs, decided when it is created. */
export type FakeRun =
  /** Starts after `startMs`, logs `steps` tqdm steps `stepMs` apart, then succeeds. */
  | { kind: 'succeed'; startMs?: number; steps?: number; stepMs?: number }
  /** Runs like `succeed`, then fails with `error` as the model's message. */
  | { kind: 'fail'; error: string; steps?: number; stepMs?: number }
  /** Starts and never ends (until canceled). */
  | { kind: 'hang' };

/** A model the fake knows: its name, its current version, and the input names its schema has. */
export interface FakeModel {
  name: string;
  version: string;
  /**
   * One of Replicate's official models, which alone run by name (`POST /models/{owner}/{name}/predictions`); any
   * other runs only by version, and its name there is a 404 (replicate-javascript#347, replicate-python#320).
   */
  official: boolean;
  inputs: readonly string[];
}

/** A community model: run by its version. */
export const REAL_ESRGAN: FakeModel = {
  name: 'nightmareai/real-esrgan',
  version: 'f121d640bd286e1fdc67f9799164c1d5be36ff74576ee11c803ae5b665dd46aa',
  official: false,
  inputs: ['image', 'scale', 'face_enhance'],
};

/** An official model: run by name. Its versions are not published: the fake's predictions carry a stand-in. */
export const FLUX_KONTEXT_PRO: FakeModel = {
  name: 'black-forest-labs/flux-kontext-pro',
  version: '0'.repeat(64),
  official: true,
  inputs: ['prompt', 'input_image', 'aspect_ratio', 'output_format', 'safety_tolerance', 'seed'],
};

/** An official model with a `num_outputs` input (1 to 4), whose output is then a list of that many files. */
export const FLUX_SCHNELL: FakeModel = {
  name: 'black-forest-labs/flux-schnell',
  version: '0'.repeat(64),
  official: true,
  inputs: ['prompt', 'seed', 'num_outputs', 'aspect_ratio', 'output_format', 'go_fast'],
};

export interface FakePredictionRecord {
  id: string;
  /** `model` when created by `POST /models/{owner}/{name}/predictions`, `version` by `POST /predictions`. */
  createdBy: 'model' | 'version';
  model: string;
  version: string;
  /** `Prefer` as received, if any. */
  prefer: string | undefined;
  /** The input as received, with each image (data URI or uploaded file URL) replaced by its bytes' sha256. */
  input: Record<string, unknown>;
  /** How each image input arrived. */
  imageSources: Record<string, 'data-uri' | 'file'>;
  /** The inputs received that the model does not have, which never reached it. */
  dropped: string[];
  status: 'starting' | 'processing' | 'succeeded' | 'failed' | 'canceled';
  /** The status the creation's answer carried. */
  answeredStatus?: string;
  canceledAt?: number;
}

export interface FakeFileRecord {
  id: string;
  filename: string;
  contentType: string;
  size: number;
  sha256: string;
  deleted: boolean;
}

/** One request as the fake saw it. */
export interface FakeRequestRecord {
  method: string;
  path: string;
  status: number;
}

export interface FakeReplicate {
  /** The fake's own base, `http://127.0.0.1:<port>/v1`: Prism's upstream. */
  url: string;
  /** The base URL clients use (api.replicate.com's role): URLs in answers are made under it. Defaults to `url`. */
  publicUrl: string;
  token: string;
  requests: FakeRequestRecord[];
  predictions: FakePredictionRecord[];
  files: FakeFileRecord[];
  /** Prediction ids in the order their cancels arrived. */
  cancels: string[];
  /** How predictions created from now on run. */
  run(next: FakeRun): void;
  /** The next `count` requests matching `path` (a prefix under `/v1`, e.g. `/predictions`) answer `status`. */
  failRequests(options: { status: number; count: number; path?: string; method?: string; retryAfter?: number }): void;
  /** Every answer is held this long before it is sent. */
  slow(ms: number): void;
  /** Connections are dropped as they arrive (`true`) or served again (`false`). */
  down(isDown: boolean): void;
  waitFor(predicate: (fake: FakeReplicate) => boolean, what: string, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

interface Prediction extends FakePredictionRecord {
  createdAt: string;
  startedAt?: string;
  completedAt?: string;
  logs: string;
  output: string | string[] | null;
  error: string | null;
  received: Record<string, unknown>;
  plan: FakeRun;
  timers: NodeJS.Timeout[];
  /** Resolvers of creations waiting (`Prefer: wait`) for the prediction to end. */
  waiters: (() => void)[];
}

interface HttpFailure {
  status: number;
  count: number;
  path: string;
  method: string | undefined;
  retryAfter: number | undefined;
}

const ALLOWED_FIELDS = {
  model: new Set(['input', 'stream', 'webhook', 'webhook_events_filter']),
  version: new Set(['version', 'input', 'stream', 'webhook', 'webhook_events_filter']),
};
/** The document's `Prefer` pattern. */
const PREFER_PATTERN = /^wait(=([1-9]|[1-9][0-9]|60))?$/;
/** Replicate's default wait when `Prefer: wait` names none. */
const DEFAULT_WAIT_SECONDS = 60;
const BAR_WIDTH = 10;

export function sha256(data: Buffer | Uint8Array): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Starts the fake on a loopback port, knowing `models` (real-esrgan and flux-kontext-pro unless told otherwise). */
export async function startFakeReplicate(
  options: { models?: readonly FakeModel[]; token?: string } = {},
): Promise<FakeReplicate> {
  const models = options.models ?? [REAL_ESRGAN, FLUX_KONTEXT_PRO, FLUX_SCHNELL];
  const token = options.token ?? `r8_${randomBytes(12).toString('hex')}`;
  const byId = new Map<string, Prediction>();
  const fileData = new Map<string, { record: FakeFileRecord; body: object }>();
  const outputs = new Map<string, Buffer>();
  const failures: HttpFailure[] = [];
  const sockets = new Set<Socket>();
  let plan: FakeRun = { kind: 'succeed' };
  let slowMs = 0;
  let isDown = false;
  let outputsMade = 0;

  const server: Server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      if (!response.headersSent) problem(response, 500, 'Internal Server Error', String(error));
      else response.destroy();
    });
  });
  server.on('connection', (socket) => {
    if (isDown) {
      socket.destroy();
      return;
    }
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  const fake: FakeReplicate = {
    url: `http://127.0.0.1:${port}/v1`,
    publicUrl: `http://127.0.0.1:${port}/v1`,
    token,
    requests: [],
    predictions: [],
    files: [],
    cancels: [],
    run(next) {
      plan = next;
    },
    failRequests({ status, count, path = '/', method, retryAfter }) {
      failures.push({ status, count, path, method, retryAfter });
    },
    slow(ms) {
      slowMs = ms;
    },
    down(next) {
      isDown = next;
      if (next) for (const socket of sockets) socket.destroy();
    },
    async waitFor(predicate, what, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      while (!predicate(fake)) {
        if (Date.now() > deadline) throw new Error(`fake Replicate: still waiting for ${what} after ${timeoutMs} ms`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async close() {
      for (const prediction of byId.values()) prediction.timers.forEach(clearTimeout);
      const closed = once(server, 'close');
      server.close();
      server.closeAllConnections();
      await closed;
    },
  };

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? '/', 'http://fake');
    const method = request.method ?? 'GET';
    const path = url.pathname.replace(/^\/v1(?=\/)/, '');
    const body = await readAll(request);
    if (slowMs > 0) await new Promise((resolve) => setTimeout(resolve, slowMs));
    const record: FakeRequestRecord = { method, path, status: 0 };
    fake.requests.push(record);
    response.on('finish', () => (record.status = response.statusCode));
    if (!url.pathname.startsWith('/v1/')) return problem(response, 404, 'Not found', 'Not found');

    const output = /^\/outputs\/([a-z0-9]+(?:-\d+)?)\.png$/.exec(path);
    if (method === 'GET' && output) {
      const png = outputs.get(output[1]);
      if (!png) return problem(response, 404, 'Not found', 'Not found');
      response.writeHead(200, { 'Content-Type': 'image/png', 'Content-Length': png.length }).end(png);
      return;
    }

    if (request.headers.authorization !== `Bearer ${token}`) {
      return problem(response, 401, 'Unauthenticated', 'You did not pass a valid authentication token');
    }
    const failure = failures.find(
      (candidate) =>
        candidate.count > 0 && path.startsWith(candidate.path) && (!candidate.method || candidate.method === method),
    );
    if (failure) {
      failure.count--;
      const headers: Record<string, string> =
        failure.retryAfter === undefined ? {} : { 'Retry-After': String(failure.retryAfter) };
      const title = failure.status === 429 ? 'Too Many Requests' : 'Internal Server Error';
      return problem(response, failure.status, title, `fake failure ${failure.status}`, headers);
    }

    let match: RegExpExecArray | null;
    if (method === 'GET' && path === '/account') {
      return json(response, 200, { type: 'user', username: 'fake', name: 'Fake Replicate' });
    }
    if (method === 'GET' && (match = /^\/models\/([^/]+)\/([^/]+)$/.exec(path))) {
      const model = models.find((candidate) => candidate.name === `${match![1]}/${match![2]}`);
      if (!model) return problem(response, 404, 'Not found', 'The requested resource could not be found.');
      return json(response, 200, modelView(model));
    }
    if (method === 'GET' && (match = /^\/models\/([^/]+)\/([^/]+)\/versions\/([^/]+)$/.exec(path))) {
      const model = models.find((candidate) => candidate.name === `${match![1]}/${match![2]}`);
      // An official model lists no versions (cog-safe-push#8): only a community model's own version is found.
      if (!model || model.official || model.version !== match[3]) {
        return problem(response, 404, 'Not found', 'The requested resource could not be found.');
      }
      return json(response, 200, versionView(model));
    }
    if (method === 'POST' && (match = /^\/models\/([^/]+)\/([^/]+)\/predictions$/.exec(path))) {
      const model = models.find((candidate) => candidate.name === `${match![1]}/${match![2]}`);
      if (!model?.official) return problem(response, 404, 'Not found', 'The requested resource could not be found.');
      return createPrediction(request, response, body, model, 'model');
    }
    if (method === 'POST' && path === '/predictions') {
      return createPrediction(request, response, body, undefined, 'version');
    }
    if (method === 'GET' && (match = /^\/predictions\/([a-z0-9]+)$/.exec(path))) {
      const prediction = byId.get(match[1]);
      if (!prediction) return problem(response, 404, 'Not found', 'The requested resource could not be found.');
      return json(response, 200, view(prediction));
    }
    if (method === 'POST' && (match = /^\/predictions\/([a-z0-9]+)\/cancel$/.exec(path))) {
      const prediction = byId.get(match[1]);
      if (!prediction) return problem(response, 404, 'Not found', 'The requested resource could not be found.');
      fake.cancels.push(prediction.id);
      if (prediction.status === 'starting' || prediction.status === 'processing') {
        prediction.canceledAt = Date.now();
        end(prediction, 'canceled');
      }
      return json(response, 200, view(prediction));
    }
    if (method === 'POST' && path === '/files') return createFile(request, response, body);
    if ((match = /^\/files\/([a-z0-9]+)$/.exec(path))) {
      const file = fileData.get(match[1]);
      if (!file || file.record.deleted) return problem(response, 404, 'Not found', 'File not found');
      if (method === 'GET') return json(response, 200, file.body);
      if (method === 'DELETE') {
        file.record.deleted = true;
        response.writeHead(204).end();
        return;
      }
    }
    problem(response, 404, 'Not found', 'The requested resource could not be found.');
  }

  async function createPrediction(
    request: IncomingMessage,
    response: ServerResponse,
    raw: Buffer,
    byName: FakeModel | undefined,
    createdBy: 'model' | 'version',
  ): Promise<void> {
    if (!isJson(request)) return problem(response, 415, 'Unsupported Media Type', 'Expected application/json');
    const prefer = request.headers['prefer'] as string | undefined;
    if (prefer !== undefined && !PREFER_PATTERN.test(prefer)) {
      return problem(response, 400, 'Invalid Prefer header', `Prefer: '${prefer}' is not wait or wait=1..60`);
    }
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw.toString('utf8')) as Record<string, unknown>;
    } catch {
      return problem(response, 400, 'Bad Request', 'The request body is not valid JSON');
    }
    const unknown = Object.keys(body).filter((key) => !ALLOWED_FIELDS[createdBy].has(key));
    if (unknown.length > 0)
      return invalid(
        response,
        unknown.map((key) => `Additional property ${key} is not allowed`),
      );
    const model = byName ?? models.find((candidate) => candidate.version === body['version']);
    if (!model) return problem(response, 422, 'Invalid version or not permitted', 'Invalid version or not permitted');
    const input = body['input'];
    if (typeof input !== 'object' || input === null || Array.isArray(input)) {
      return invalid(response, ['input: Invalid type. Expected: object']);
    }
    const received = input as Record<string, unknown>;
    const dropped = Object.keys(received).filter((name) => !model.inputs.includes(name));
    const recorded: Record<string, unknown> = {};
    const imageSources: Record<string, 'data-uri' | 'file'> = {};
    for (const [name, value] of Object.entries(received)) {
      if (dropped.includes(name)) continue;
      const image = typeof value === 'string' ? readImage(value) : undefined;
      if (image === null) return invalid(response, [`input.${name}: the file at ${String(value)} does not exist`]);
      if (image) {
        recorded[name] = image.sha256;
        imageSources[name] = image.source;
      } else recorded[name] = value;
    }

    const id = randomBytes(13).toString('hex').slice(0, 26);
    const prediction: Prediction = {
      id,
      createdBy,
      model: model.name,
      version: model.version,
      prefer,
      input: recorded,
      dropped,
      imageSources,
      status: 'starting',
      createdAt: new Date().toISOString(),
      logs: '',
      output: null,
      error: null,
      received,
      plan,
      timers: [],
      waiters: [],
    };
    byId.set(id, prediction);
    fake.predictions.push(prediction);
    schedule(prediction);

    if (prefer !== undefined) {
      const seconds = Number(prefer.split('=')[1] ?? DEFAULT_WAIT_SECONDS);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, seconds * 1000);
        prediction.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    prediction.answeredStatus = prediction.status;
    json(response, isFinal(prediction) || prefer === undefined ? 201 : 202, view(prediction));
  }

  /** An input value that names an image: its digest, `undefined` if it is no image, `null` if its file is unknown. */
  function readImage(value: string): { sha256: string; source: 'data-uri' | 'file' } | null | undefined {
    const inline = /^data:[^,]*;base64,(.*)$/s.exec(value);
    if (inline) return { sha256: sha256(Buffer.from(inline[1], 'base64')), source: 'data-uri' };
    const filesBase = `${fake.publicUrl}/files/`;
    if (!value.startsWith(filesBase)) return undefined;
    const file = fileData.get(value.slice(filesBase.length));
    return file && !file.record.deleted ? { sha256: file.record.sha256, source: 'file' } : null;
  }

  function schedule(prediction: Prediction): void {
    const run = prediction.plan;
    const at = (ms: number, step: () => void | Promise<void>) => {
      prediction.timers.push(
        setTimeout(() => {
          if (!isFinal(prediction)) void Promise.resolve(step()).catch(() => end(prediction, 'failed'));
        }, ms),
      );
    };
    const startMs = run.kind === 'succeed' ? (run.startMs ?? 100) : 100;
    at(startMs, () => {
      prediction.status = 'processing';
      prediction.startedAt = new Date().toISOString();
      prediction.logs = 'Loading model...\n';
    });
    if (run.kind === 'hang') return;
    const steps = run.steps ?? 4;
    const stepMs = run.stepMs ?? 150;
    for (let step = 1; step <= steps; step++) {
      at(startMs + step * stepMs, () => {
        prediction.logs += `${tqdm(step, steps)}\n`;
      });
    }
    at(startMs + (steps + 1) * stepMs, async () => {
      if (run.kind === 'fail') {
        prediction.error = run.error;
        prediction.logs += `Traceback (most recent call last):\n${run.error}\n`;
        end(prediction, 'failed');
        return;
      }
      // A model with a `num_outputs` input (black-forest-labs/flux-schnell, say) answers a list of that many files.
      const count = prediction.received['num_outputs'];
      const names = typeof count === 'number' ? Array.from({ length: count }, (_, n) => `${prediction.id}-${n}`) : [];
      for (const name of names.length > 0 ? names : [prediction.id]) {
        outputsMade++;
        const colour = `#${(((outputsMade * 2654435761) >>> 8) & 0xffffff).toString(16).padStart(6, '0')}`;
        outputs.set(name, await makeImage(256, 320, 'png', colour));
      }
      prediction.output =
        names.length > 0
          ? names.map((name) => `${fake.publicUrl}/outputs/${name}.png`)
          : `${fake.publicUrl}/outputs/${prediction.id}.png`;
      end(prediction, 'succeeded');
    });
  }

  function end(prediction: Prediction, status: 'succeeded' | 'failed' | 'canceled'): void {
    prediction.status = status;
    prediction.completedAt = new Date().toISOString();
    prediction.timers.forEach(clearTimeout);
    for (const wake of prediction.waiters.splice(0)) wake();
  }

  /** `schemas_prediction_response`. */
  function view(prediction: Prediction): object {
    const get = `${fake.publicUrl}/predictions/${prediction.id}`;
    return {
      id: prediction.id,
      model: prediction.model,
      version: prediction.version,
      input: prediction.received,
      logs: prediction.logs,
      output: prediction.output,
      data_removed: false,
      error: prediction.error,
      status: prediction.status,
      source: 'api',
      created_at: prediction.createdAt,
      ...(prediction.startedAt ? { started_at: prediction.startedAt } : {}),
      ...(prediction.completedAt ? { completed_at: prediction.completedAt } : {}),
      ...(prediction.status === 'succeeded' ? { metrics: { predict_time: 0.5, total_time: 0.6 } } : {}),
      urls: {
        get,
        cancel: `${get}/cancel`,
        stream: `${fake.publicUrl}/stream/${prediction.id}`,
        web: `https://replicate.com/p/${prediction.id}`,
      },
    };
  }

  async function createFile(request: IncomingMessage, response: ServerResponse, raw: Buffer): Promise<void> {
    const contentType = request.headers['content-type'] ?? '';
    if (!/^multipart\/form-data;\s*boundary=/i.test(contentType)) {
      return problem(response, 415, 'Unsupported Media Type', 'Expected multipart/form-data');
    }
    let form: FormData;
    try {
      form = await new Response(raw, { headers: { 'Content-Type': contentType } }).formData();
    } catch {
      return problem(response, 400, 'Bad Request', 'The multipart body could not be read');
    }
    const unknown = [...form.keys()].filter((key) => !['content', 'filename', 'metadata', 'type'].includes(key));
    if (unknown.length > 0)
      return invalid(
        response,
        unknown.map((key) => `Additional property ${key} is not allowed`),
      );
    const content = form.get('content');
    if (!(content instanceof Blob)) return invalid(response, ['content: a file is required']);
    let metadata: unknown = {};
    const metadataPart = form.get('metadata');
    if (metadataPart !== null) {
      try {
        metadata = JSON.parse(typeof metadataPart === 'string' ? metadataPart : await metadataPart.text());
      } catch {
        return invalid(response, ['metadata: Invalid JSON']);
      }
    }
    const bytes = new Uint8Array(await content.arrayBuffer());
    const typePart = form.get('type');
    const id = randomBytes(13).toString('hex').slice(0, 26);
    const record: FakeFileRecord = {
      id,
      filename: (form.get('filename') as string | null) ?? content.name ?? 'file',
      contentType: typeof typePart === 'string' ? typePart : content.type || 'application/octet-stream',
      size: bytes.length,
      sha256: sha256(bytes),
      deleted: false,
    };
    const created = new Date();
    const body = {
      id,
      content_type: record.contentType,
      size: record.size,
      checksums: { sha256: record.sha256 },
      metadata,
      created_at: created.toISOString(),
      expires_at: new Date(created.getTime() + 24 * 3600 * 1000).toISOString(),
      urls: { get: `${fake.publicUrl}/files/${id}` },
    };
    fileData.set(id, { record, body });
    fake.files.push(record);
    json(response, 201, body);
  }

  return fake;
}

function isFinal(prediction: { status: string }): boolean {
  return prediction.status === 'succeeded' || prediction.status === 'failed' || prediction.status === 'canceled';
}

/** A tqdm progress line as Python models print it: ` 45%|████▌     | 9/20 [00:01<00:02,  6.10it/s]`. */
function tqdm(step: number, steps: number): string {
  const percent = Math.floor((step / steps) * 100);
  const filled = Math.round((step / steps) * BAR_WIDTH);
  const bar = '█'.repeat(filled) + ' '.repeat(BAR_WIDTH - filled);
  return `${String(percent).padStart(3)}%|${bar}| ${step}/${steps} [00:0${step}<00:0${steps - step},  6.10it/s]`;
}

function isJson(request: IncomingMessage): boolean {
  return /^application\/json(\s*;|$)/i.test(request.headers['content-type'] ?? '');
}

async function readAll(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** `models.get`'s answer (`schemas_model_response`), its latest version with the schema of the model's inputs. */
function modelView(model: FakeModel): object {
  const [owner, name] = model.name.split('/');
  return {
    url: `https://replicate.com/${model.name}`,
    owner,
    name,
    description: null,
    visibility: 'public',
    is_official: model.official,
    github_url: null,
    paper_url: null,
    license_url: null,
    run_count: 0,
    cover_image_url: null,
    default_example: null,
    latest_version: versionView(model),
  };
}

/** `models.versions.get`'s answer (`schemas_version_response`): a Cog model's OpenAPI schema, as Replicate keeps it. */
function versionView(model: FakeModel): object {
  const properties = Object.fromEntries(model.inputs.map((input) => [input, { title: input }]));
  return {
    id: model.version,
    created_at: '2026-01-05T10:00:00.000000Z',
    cog_version: '0.16.8',
    openapi_schema: { openapi: '3.0.2', components: { schemas: { Input: { type: 'object', properties } } } },
  };
}

function json(response: ServerResponse, status: number, body: object): void {
  response.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
}

/** Replicate's error body: `application/problem+json` with `title`, `detail` and `status`. */
function problem(
  response: ServerResponse,
  status: number,
  title: string,
  detail: string,
  headers: Record<string, string> = {},
): void {
  response
    .writeHead(status, { 'Content-Type': 'application/problem+json', ...headers })
    .end(JSON.stringify({ title, detail, status }));
}

/** 422 as Replicate answers an input its schema refuses: the problems in `detail`, one a line. */
function invalid(response: ServerResponse, problems: string[]): void {
  const detail = problems.map((line) => `- ${line}`).join('\n');
  response.writeHead(422, { 'Content-Type': 'application/problem+json' }).end(
    JSON.stringify({
      title: 'Input validation failed',
      detail,
      status: 422,
      invalid_fields: problems.map((description) => ({ type: 'invalid', field: 'input', description })),
    }),
  );
}
