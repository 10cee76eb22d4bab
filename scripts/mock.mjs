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
 *
 * What the mock does not check is listed in docs/api-guide.md ("Building a frontend").
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
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

const contract = parse(await readFile(join(root, 'openapi/openapi.yaml'), 'utf8'));
const OPERATIONS = operationsOf(contract);
const JOB_CREATION = OPERATIONS.find((operation) => operation.id === 'createGenerationJob');

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
  const media = /^\/media\/([0-9a-fA-F-]{36})\/(preview\.webp|stock\.jpg)$/.exec(path);
  const handled =
    request.method === 'GET' || request.method === 'HEAD'
      ? media
        ? serveMedia(media[1], media[2], response)
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
      contentTypeRefusal(request.headers['content-type']);
    const refused = beforeUpload ?? (await toolFormRefusal(request.headers['content-type'], body)) ?? contractRefusal;
    if (refused) return problem(refused);
  } else if (contractRefusal) {
    return problem(contractRefusal);
  } else if (accepted && headerRefused) {
    return problem(headerRefused);
  }
  if (accepted && typeof wait === 'number') answerHeaders['preference-applied'] = `wait=${wait}`;
  let answerBody = answer.body;
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
  response.end(answerBody);
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

/** A real image for any media path, as the service serves one: a preview WebP (<= 512 px) or the full JPEG. */
async function serveMedia(id, file, response) {
  const digest = createHash('sha256').update(id.toLowerCase()).digest();
  const source = RESULTS[digest[0] % RESULTS.length];
  const body =
    file === 'stock.jpg'
      ? await readFile(source)
      : await sharp(source).resize(512, 512, { fit: 'inside' }).webp({ quality: 80 }).toBuffer();
  response.writeHead(200, {
    'Content-Type': file === 'stock.jpg' ? 'image/jpeg' : 'image/webp',
    'Content-Length': body.length,
    'Cache-Control': 'public, max-age=31536000, immutable',
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
