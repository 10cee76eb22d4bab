#!/usr/bin/env node
/**
 * The mock a frontend builds against (`npm run mock`): Prism serves the contract's examples, and in front of it this
 * server answers the media paths with real example images (the local engine's outputs in docs/examples, so a page
 * built on the mock shows pictures) and serves the playground (dist/playground). It answers as the service does
 * with the service's own code (dist/, built by `npm run build`): `Prefer` parsing, problem documents, request ids.
 *
 *   MOCK_HOST (127.0.0.1), MOCK_PORT (4010)
 *
 * Every other request goes to Prism, which validates it against the contract and answers the documented example
 * (401 without a bearer key). Prism alone answers what the contract lists, not what the service does, so this server
 * corrects it where the request and the contract are enough to know better:
 *
 * - Job creation answers 202 `pending`, or 200 with the final item under `Prefer: wait=N` (Prism would pick the
 *   lowest 2xx, 200, every time).
 * - Job creation is served without the trailing slash too, as the contract says.
 * - `Preference-Applied: wait=N` only on an answer to `Prefer: wait=N` (Prism sends the example's `wait=30` always).
 * - A request the contract refuses answers 400 `validation_failed` whose `errors[]` name what Prism found broken
 *   (Prism answers the first 400 or 422 example, which names some other field).
 * - Every answer carries an `X-Request-Id` (the client's own when it sends a sane one).
 * - A `Prefer: wait` outside 1..60, or an `Idempotency-Key` not of 1 to 255 characters, answers 400; a job body that is
 *   not a multipart form 400 `malformed_multipart`, as the service answers them.
 * - A job form whose fields do not fit its tool answers as the service does, by the service's own check of them: a
 *   tool not in the catalog 422 `unknown_tool`, a field the tool does not take or one sent twice 400
 *   `unexpected_field`, a required input missing 400 `validation_failed`, a generation type of another tool 422
 *   `invalid_generation_type`.
 * - A `webhook_url` the contract refuses answers 422 `invalid_webhook_url`, as the service does.
 * - `GET /generation/generationTypes?tool=` answers the service's own list for that tool (404 for an unknown one),
 *   rather than one example for every tool: a form built from it is one the check above takes.
 * - A job sent as JSON is checked as the service checks it (the same fields for its tool, each image input an https URL
 *   or a file id); its URLs are not fetched.
 * - `POST /files` answers the file it was sent, as the service does: a fresh `file_id`, the image's own format, size
 *   and dimensions (415 for bytes that are no image), expiring in 24 hours; `GET` and `DELETE /files/{id}` then answer
 *   for it (404 for a file the mock did not store, or deleted), for the mock's lifetime.
 * - The examples' media URLs are signed afresh on every answer, as the service signs them (with a key of the mock's
 *   own), on the mock's own origin (`output_url`), valid for an hour (`media_urls_expire_at`); the media paths answer
 *   them as the service does: a URL with a valid signature (or any `Authorization: Bearer` key) gets its image, an
 *   unsigned or altered one 403 `media_url_invalid`, an expired one 403 `media_url_expired`.
 *
 * What the mock does not check is listed in docs/api-guide.md ("Building a frontend").
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { createServer, request as forward } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { extname, join, normalize } from 'node:path';
import { buffer } from 'node:stream/consumers';
import { fileURLToPath, URLSearchParams } from 'node:url';
import busboy from 'busboy';
import sharp from 'sharp';
import { parse } from 'yaml';
import { BUILT_IN } from '../dist/catalog/catalog.js';
import { GenerationTypeDto, toolAskedFor } from '../dist/catalog/catalog.dto.js';
import { assignRequestId } from '../dist/common/logging.js';
import { preferredWait } from '../dist/common/prefer.js';
import { DomainError } from '../dist/common/problem.js';
import { IdempotencyKeys } from '../dist/generation/idempotency.js';
import { checkFormContentType, checkToolForm } from '../dist/generation/job-form.js';
import { imageSourceOf, jsonJobParts } from '../dist/generation/job-json.js';
import { MEDIA_URL_MAX_AGE_SECONDS } from '../dist/media/media.js';
import { MediaUrls } from '../dist/media/media-urls.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const host = process.env.MOCK_HOST ?? '127.0.0.1';
const port = Number(process.env.MOCK_PORT ?? 4010);
const PLAYGROUND = join(root, 'dist/playground');
const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.map': 'application/json',
};
/** The drawn examples' outputs: a media path's id picks one, the same one every time. */
const RESULTS = [
  'fashion_swap',
  'fashion_swap_half-upper',
  'fashion_swap_half-lower',
  'lengerie',
  'fashion_card',
  'furniture',
  'fabric',
  'default',
].map((example) => join(root, 'docs/examples', example, 'output.jpg'));

/** A key of this run's own: the mock's URLs are signed and checked as the service's are, by the service's code. */
const MEDIA_URLS = new MediaUrls(randomBytes(32).toString('base64url'), undefined, 3_600_000, '');
/** A signed media URL of the contract's examples, with the service's origin on `output_url`'s. */
const EXAMPLE_MEDIA_URL =
  /(http:\/\/localhost:3000\/)?(media\/[0-9a-f-]{36}\/(?:preview(?:-[1-3])?\.webp|stock(?:-[1-3])?\.jpg))\?expires=\d+&signature=[\w-]+/g;
const EXAMPLE_URLS_EXPIRY = /("media_urls_expire_at":\s*)"[^"]+"/g;

const contract = parse(await readFile(join(root, 'openapi/openapi.yaml'), 'utf8'));
const OPERATIONS = operationsOf(contract);
const JOB_CREATION = OPERATIONS.find((operation) => operation.id === 'createGenerationJob');
/** The files `POST /files` stored, by id: what `GET /files/{id}` answers. */
const storedFiles = new Map();
const FILE_TTL_MS = 24 * 3600_000;

const prismPort = await freePort();
const prism = spawn(
  join(root, 'node_modules/.bin/prism'),
  ['mock', '-h', '127.0.0.1', '-p', String(prismPort), join(root, 'openapi/openapi.yaml')],
  { stdio: ['ignore', 'inherit', 'inherit'] },
);
prism.once('exit', (code) => {
  console.error(`prism exited (${code}); the mock stops`);
  process.exit(1);
});
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    prism.kill('SIGTERM');
    process.exit(0);
  });
}

const server = createServer((request, response) => {
  assignRequestId(request, response);
  const path = decodeURIComponent((request.url ?? '/').split('?')[0]);
  const media = /^\/media\/([0-9a-fA-F-]{36})\/(preview(?:-[1-3])?\.webp|stock(?:-[1-3])?\.jpg)$/.exec(path);
  const handled =
    request.method === 'GET' || request.method === 'HEAD'
      ? media
        ? serveMedia(media[1], media[2], request, response)
        : path === '/playground' || path.startsWith('/playground/')
          ? servePlayground(path, response)
          : null
      : null;
  if (handled) {
    handled.catch((error) => {
      response.writeHead(500, { 'Content-Type': 'text/plain' }).end(String(error));
    });
    return;
  }
  mockOperation(request, response).catch((error) => {
    if (!response.headersSent) response.writeHead(502, { 'Content-Type': 'text/plain' });
    response.end(String(error));
  });
});

await waitForPrism();
server.listen(port, host, () => {
  console.log(`mock: http://${host}:${port} (playground: http://${host}:${port}/playground/)`);
});

/** Prism's answer to the request, corrected where the service answers otherwise (see the top of this file). */
async function mockOperation(request, response) {
  const [rawPath, query] = splitUrl(request.url ?? '/');
  // The contract serves job creation at both paths; Prism knows only the one the contract lists.
  const path = rawPath === JOB_CREATION.path.replace(/\/$/, '') ? JOB_CREATION.path : rawPath;
  const operation = OPERATIONS.find((candidate) => candidate.method === request.method && candidate.pattern.test(path));
  const creation = operation === JOB_CREATION;
  let wait;
  let headerRefused;
  try {
    wait = operation?.takesPreferWait ? preferredWait(request.headers.prefer) : undefined;
    if (creation) IdempotencyKeys.validate(request.headersDistinct['idempotency-key']);
  } catch (error) {
    headerRefused = error;
  }
  const headers = { ...request.headers };
  if (creation && !/(^|[,;\s])code\s*=/i.test(String(headers.prefer ?? ''))) {
    // Prism answers a `Prefer: code=` it is sent; the client's own choice of code goes through untouched.
    headers.prefer = [headers.prefer, `code=${typeof wait === 'number' ? 200 : 202}`].filter(Boolean).join(', ');
  }
  const body = await buffer(request);
  if (body.length > 0 || headers['content-length'] !== undefined) {
    delete headers['transfer-encoding'];
    headers['content-length'] = String(body.length);
  }
  const answer = await askPrism(request.method, path + query, headers, body);
  const answerHeaders = { ...answer.headers };
  delete answerHeaders['content-length'];
  delete answerHeaders['preference-applied'];
  const problem = (error) => {
    response.writeHead(error.status, { ...answerHeaders, 'content-type': 'application/problem+json; charset=utf-8' });
    response.end(JSON.stringify(error.toProblem()));
  };

  const contractRefusal = answer.status === 400 || answer.status === 422 ? refusalOf(answer) : undefined;
  const accepted = answer.status >= 200 && answer.status < 300;
  // Prism's own 415 is its refusal of a body that is not a form; the service answers that with a problem of its own.
  if (creation && (accepted || contractRefusal || answer.status === 415)) {
    // In the service's order: the headers (Prefer, Idempotency-Key) are read before the upload, the body's type before
    // its fields, and the form's fields are matched to the tool before the rules the contract also holds for them (a
    // webhook URL's form) are checked.
    const beforeUpload =
      headerRefused ??
      (violationsOf(answer).some(({ location }) => location[1] !== 'body') ? contractRefusal : undefined) ??
      (isJson(request.headers['content-type']) ? undefined : contentTypeRefusal(request.headers['content-type']));
    const formRefusal = isJson(request.headers['content-type'])
      ? jsonJobRefusal(body)
      : await toolFormRefusal(request.headers['content-type'], body);
    const refused = beforeUpload ?? formRefusal ?? contractRefusal;
    if (refused) return problem(refused);
  } else if (contractRefusal) {
    return problem(contractRefusal);
  } else if (accepted && headerRefused) {
    return problem(headerRefused);
  }
  if (accepted && typeof wait === 'number') answerHeaders['preference-applied'] = `wait=${wait}`;
  let answerBody = answer.body;
  if (accepted && operation?.id === 'uploadFile') {
    const stored = await storeFile(request.headers['content-type'], body);
    if (stored instanceof DomainError) return problem(stored);
    answerHeaders.location = `/files/${stored.file_id}`;
    answerBody = JSON.stringify(stored);
  }
  if (accepted && (operation?.id === 'getFile' || operation?.id === 'deleteFile')) {
    const id = path.slice('/files/'.length);
    const stored = storedFiles.get(id);
    if (!stored || Date.parse(stored.expires_at) <= Date.now()) {
      return problem(new DomainError('not_found', `File ${id.slice(0, 80)} was not found.`));
    }
    if (operation.id === 'deleteFile') storedFiles.delete(id);
    else answerBody = JSON.stringify(stored);
  }
  if (accepted && operation?.id === 'listGenerationTypes') {
    try {
      // The local engine's descriptions: the mock knows no routing file.
      const tool = toolAskedFor(new URLSearchParams(query).get('tool') ?? '', BUILT_IN);
      answerBody = JSON.stringify(GenerationTypeDto.listFor(tool, () => undefined));
    } catch (error) {
      if (error instanceof DomainError) return problem(error);
      throw error;
    }
  }
  response.writeHead(answer.status, answerHeaders);
  response.end(signedAfresh(answerBody, `http://${request.headers.host ?? `${host}:${port}`}`));
}

/**
 * An answer whose example media URLs are signed now, as the service signs every read of an item, with `output_url` on
 * `origin` (the mock's own, as the client reached it).
 */
function signedAfresh(body, origin) {
  const text = Buffer.isBuffer(body) ? body.toString('utf8') : String(body);
  if (!text.includes('?expires=')) return body;
  const expires = MEDIA_URLS.expiresFrom(Date.now());
  return text
    .replace(
      EXAMPLE_MEDIA_URL,
      (_url, absolute, path) => `${absolute ? `${origin}/` : ''}${MEDIA_URLS.sign(path, expires)}`,
    )
    .replace(EXAMPLE_URLS_EXPIRY, (_field, name) => `${name}"${new Date(expires * 1000).toISOString()}"`);
}

/**
 * The problem the service answers for a request Prism refused, built from Prism's violations: 400, or 422 for a
 * webhook URL alone; undefined when Prism's answer is not such a refusal (a Prism 422 of its own, on an operation
 * that documents no validation error, stays as it is).
 */
function refusalOf(answer) {
  const violations = violationsOf(answer);
  const contentType = String(answer.headers['content-type'] ?? '');
  const documented = contentType.startsWith('application/problem+json') && answer.body.includes('"urn:igs:problem:');
  if (violations.length === 0) {
    // Prism's own answer to a body it cannot parse, not a problem document.
    return answer.status === 400 && !contentType.startsWith('application/problem+json')
      ? new DomainError('bad_request', 'The request body is not valid JSON.')
      : undefined;
  }
  if (!documented) return undefined;
  if (violations.some((violation) => violation.location.length < 2)) {
    // The whole request, not a field of it: a content type the operation does not take.
    return new DomainError('bad_request', `The request's content type is not accepted (${violations[0].message}).`);
  }
  const errors = violations.map(fieldErrorOf);
  // The service answers every fault of a webhook URL (its format, its length) with a code of its own, once the
  // other fields, checked first, are right.
  const [webhook] = errors;
  if (errors.every((error) => error.field === 'webhook_url')) {
    return new DomainError('invalid_webhook_url', `Invalid webhook_url: it ${webhook.message}.`, { errors });
  }
  return new DomainError('validation_failed', `Invalid ${errors[0].field}: ${errors[0].message}.`, { errors });
}

/** What Prism found broken in the request: `{location, message}`, e.g. `["request", "body", "prompt"]`. */
function violationsOf(answer) {
  return JSON.parse(answer.headers['sl-violations'] ?? '[]').filter((violation) => violation.severity === 'Error');
}

/**
 * Prism's violation as the service's `{field, message}`: `["request", "query", "status"]` names the query
 * parameter `status`; a body violation without a property (required, additionalProperties) quotes its name.
 */
function fieldErrorOf({ location, message }) {
  const named = location.slice(2).join('.');
  const field = named || /'([^']+)'/.exec(message)?.[1] || location[1];
  // "Request query parameter status must be ..." -> "must be ...".
  const at = named ? message.indexOf(` ${named} `) : -1;
  const text = at >= 0 ? message.slice(at + named.length + 2) : message.replace(/^Request (body )?/, '');
  return { field, message: text };
}

/** The contract's operations: method, path, a pattern matching concrete paths, and whether it reads Prefer: wait. */
function operationsOf(document) {
  const resolve = (node) =>
    node?.$ref
      ? node.$ref
          .slice(2)
          .split('/')
          .reduce((parent, key) => parent[key], document)
      : node;
  return Object.entries(document.paths).flatMap(([path, item]) =>
    ['get', 'put', 'post', 'delete', 'patch']
      .filter((method) => item[method])
      .map((method) => {
        const parameters = [...(item.parameters ?? []), ...(item[method].parameters ?? [])].map(resolve);
        const pattern = path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+');
        return {
          id: item[method].operationId,
          method: method.toUpperCase(),
          path,
          pattern: new RegExp(`^${pattern}$`),
          takesPreferWait: parameters.some((parameter) => parameter.in === 'header' && parameter.name === 'Prefer'),
        };
      }),
  );
}

function splitUrl(url) {
  const at = url.indexOf('?');
  return at < 0 ? [url, ''] : [url.slice(0, at), url.slice(at)];
}

function askPrism(method, path, headers, body) {
  return new Promise((resolve, reject) => {
    const upstream = forward({ host: '127.0.0.1', port: prismPort, method, path, headers }, (answer) => {
      buffer(answer).then(
        (content) => resolve({ status: answer.statusCode ?? 502, headers: answer.headers, body: content }),
        reject,
      );
    });
    upstream.once('error', reject);
    upstream.end(body);
  });
}

function isJson(contentType) {
  return /^\s*application\/json\s*(;|$)/i.test(String(contentType ?? ''));
}

/** The service's refusal of a JSON job's fields for its tool, by the service's own checks; undefined when they fit. */
function jsonJobRefusal(body) {
  try {
    const { parts, imageValues } = jsonJobParts(JSON.parse(body.toString('utf8')), BUILT_IN);
    const form = checkToolForm(parts, BUILT_IN);
    for (const name of form.images) imageSourceOf(name, imageValues.get(name));
    return undefined;
  } catch (error) {
    if (error instanceof DomainError) return error;
    // Not JSON at all: Prism's refusal names that.
    if (error instanceof SyntaxError) return new DomainError('bad_request', 'The request body is not valid JSON.');
    throw error;
  }
}

/** The `file` part of a `POST /files` body, described as the service describes a stored file, and remembered. */
function storeFile(contentType, body) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    const parser = busboy({ headers: { 'content-type': contentType } });
    parser.on('file', (name, file) => {
      file.on('data', (chunk) => name === 'file' && chunks.push(chunk));
    });
    parser.once('close', () => {
      const data = Buffer.concat(chunks);
      sharp(data)
        .metadata()
        .then(({ format, width, height }) => {
          const type = { jpeg: 'image/jpeg', png: 'image/png', webp: 'image/webp' }[format];
          if (!type || !width || !height) throw new Error('not an accepted image');
          const stored = {
            file_id: `file_${randomBytes(16).toString('hex')}`,
            content_type: type,
            width,
            height,
            size: data.length,
            expires_at: new Date(Date.now() + FILE_TTL_MS).toISOString(),
          };
          storedFiles.set(stored.file_id, stored);
          resolve(stored);
        })
        .catch(() =>
          resolve(
            new DomainError('unsupported_media_type', '"file" is not a complete JPEG, PNG or WebP image.', {
              errors: [{ field: 'file', message: 'not a complete JPEG, PNG or WebP image' }],
            }),
          ),
        );
    });
    parser.once('error', reject);
    parser.end(body);
  });
}

/** The service's refusal of a job body that is not a multipart form with its boundary; undefined for one that is. */
function contentTypeRefusal(contentType) {
  try {
    checkFormContentType(contentType);
    return undefined;
  } catch (error) {
    if (error instanceof DomainError) return error;
    throw error;
  }
}

/**
 * The service's refusal of the multipart body's fields for its tool (a required image missing, a field the tool does
 * not take, a field sent twice, an unknown tool...); undefined when they fit, or when the body cannot be read as a
 * form (Prism's refusal names that).
 */
function toolFormRefusal(contentType, body) {
  return new Promise((resolve, reject) => {
    const texts = [];
    const files = [];
    let parser;
    try {
      // As the service's parser: a field's name is read as the UTF-8 browsers and curl send.
      parser = busboy({ headers: { 'content-type': contentType }, defParamCharset: 'utf8' });
    } catch {
      resolve(undefined);
      return;
    }
    parser.on('field', (name, value) => texts.push([name, value]));
    parser.on('file', (name, file) => {
      files.push(name);
      file.resume();
    });
    parser.once('close', () => {
      try {
        checkToolForm({ texts, files }, BUILT_IN);
        resolve(undefined);
      } catch (error) {
        if (error instanceof DomainError) resolve(error);
        else reject(error);
      }
    });
    parser.once('error', () => resolve(undefined));
    parser.end(body);
  });
}

/**
 * A real image for any media path with a signature of the mock's, or any key, as the service serves one: a preview
 * WebP (<= 512 px) or the full JPEG, of an item's first result or another (`stock-1.jpg`, another picture). Unsigned, altered and expired URLs are refused as the service refuses them.
 */
async function serveMedia(id, file, request, response) {
  const query = new URL(request.url ?? '/', 'http://mock').searchParams;
  const now = Date.now();
  const keyed = /^Bearer +\S+/i.test(request.headers.authorization ?? '');
  const check = keyed
    ? 'valid'
    : MEDIA_URLS.check(
        `media/${id}/${file}`,
        query.get('expires') ?? undefined,
        query.get('signature') ?? undefined,
        now,
      );
  if (check !== 'valid') {
    const error =
      check === 'expired'
        ? new DomainError('media_url_expired', 'This media URL has expired; read the item again for a fresh one.')
        : new DomainError('media_url_invalid', 'This media URL is not signed by the mock; use the URL it returned.');
    response.writeHead(error.status, { 'Content-Type': 'application/problem+json', 'Cache-Control': 'no-store' });
    response.end(JSON.stringify(error.toProblem()));
    return;
  }
  const secondsLeft = keyed ? 0 : Math.ceil((Number(query.get('expires')) * 1000 - now) / 1000);
  const digest = createHash('sha256').update(id.toLowerCase()).digest();
  // An item's second, third... result (`stock-1.jpg`) is another picture than its first.
  const index = Number(/-(\d)\./.exec(file)?.[1] ?? 0);
  const source = RESULTS[(digest[0] + index) % RESULTS.length];
  const stock = file.startsWith('stock');
  const body = stock
    ? await readFile(source)
    : await sharp(source).resize(512, 512, { fit: 'inside' }).webp({ quality: 80 }).toBuffer();
  response.writeHead(200, {
    'Content-Type': stock ? 'image/jpeg' : 'image/webp',
    'Content-Length': body.length,
    // As the service: kept by the client alone, and no longer than the URL works.
    'Cache-Control': `private, max-age=${Math.min(secondsLeft, MEDIA_URL_MAX_AGE_SECONDS)}`,
    // As the service: media may be shown by frontends on any origin.
    'Cross-Origin-Resource-Policy': 'cross-origin',
    'Access-Control-Allow-Origin': '*',
  });
  response.end(body);
}

async function servePlayground(path, response) {
  if (path === '/playground') {
    response.writeHead(301, { Location: '/playground/' }).end();
    return;
  }
  const relative = normalize(path.slice('/playground/'.length) || 'index.html');
  const file = join(PLAYGROUND, relative);
  const type = TYPES[extname(file)];
  if (relative.startsWith('..') || !type || !(await stat(file).catch(() => null))?.isFile()) {
    response.writeHead(404, { 'Content-Type': 'text/plain' }).end('not found (run `npm run build` for the playground)');
    return;
  }
  response.writeHead(200, { 'Content-Type': type, 'Cache-Control': 'no-cache' });
  createReadStream(file).pipe(response);
}

async function waitForPrism() {
  for (let attempt = 0; attempt < 300; attempt++) {
    try {
      const answer = await fetch(`http://127.0.0.1:${prismPort}/health/live`);
      await answer.body?.cancel();
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
  throw new Error('prism did not start within 60 s');
}

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createNetServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port: free } = probe.address();
      probe.close(() => resolve(free));
    });
  });
}
