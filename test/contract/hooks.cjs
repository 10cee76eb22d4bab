// Dredd hooks for openapi/openapi.yaml, run by test/contract/dredd.contract-spec.ts against the built service.
// CommonJS because Dredd 14 require()s hook files and the project itself is ESM.
//
// Dredd turns every documented response into a transaction named
// `<path template> > <summary> > <status> > <content type>`, sends the example request and compares the answer
// with the example. These hooks:
//   - authenticate every request (`Authorization: Bearer`) except public operations (`security: []`) and the
//     ones meant to get a 401;
//   - change each request so that it provokes the documented response (unknown tool, missing parameter,
//     another user's key for a 404, ...), and carry the history item created by job creation into the
//     transactions that need one;
//   - replace Dredd's example comparison by the contract's JSON Schema of the response (types, required,
//     additionalProperties, enums, patterns), normalise `; charset=utf-8` and check documented header values;
//   - skip only what is listed in SKIP_LATER_ISSUE or SKIP_NOT_PROVOKABLE, each with its reason, and print the
//     list (the Jest test checks that Dredd skipped exactly that many transactions).
//
// Inputs (environment): CONTRACT_BASE_URL, CONTRACT_API_KEY (user 1), CONTRACT_OTHER_API_KEY (user 2, for 404s on
// user 1's items), CONTRACT_ERROR_ITEM_ID (an item of user 1 seeded with status `error`, for 409 not_complete),
// CONTRACT_DATABASE_URL (the service's database, to seed a pending item that no worker takes, for cancel's 200),
// optional CONTRACT_JOB_TIMEOUT_MS (how long to wait for a job to complete, default 60000).
// The service must believe one proxy's X-Forwarded-For (TRUST_PROXY=1): the 429 transactions come from addresses
// of their own that first use up their failed authentications, so the rest of the run is not refused.
'use strict';

const hooks = require('hooks');
const pg = require('pg');
const { randomUUID } = require('node:crypto');
const { readFileSync } = require('node:fs');
const { join } = require('node:path');
const contractSchema = require('../support/contract-schema.cjs');

function requiredEnv(name) {
  const value = process.env[name];
  if (!value) throw new Error(`hooks.cjs: environment variable ${name} is not set`);
  return value;
}

const BASE_URL = requiredEnv('CONTRACT_BASE_URL').replace(/\/+$/, '');
const API_KEY = requiredEnv('CONTRACT_API_KEY');
const OTHER_API_KEY = requiredEnv('CONTRACT_OTHER_API_KEY');
const ERROR_ITEM_ID = requiredEnv('CONTRACT_ERROR_ITEM_ID');
const DATABASE_URL = requiredEnv('CONTRACT_DATABASE_URL');
const JOB_TIMEOUT_MS = Number(process.env.CONTRACT_JOB_TIMEOUT_MS || 60_000);

const CONTRACT_FILE = join(__dirname, '..', '..', 'openapi', 'openapi.yaml');
const contract = contractSchema.loadContract();

// ---------------------------------------------------------------------------------------------------------------
// Skips. Nothing else is skipped, and every entry says why.
// ---------------------------------------------------------------------------------------------------------------

/**
 * Operations (`METHOD /path`, or `METHOD /path STATUS` for one response) that a later issue implements, each with
 * the issue as its reason, e.g.
 *   'DELETE /user/generation-history/{id}': 'issue 4 (History): not implemented yet, the route answers 404',
 * The hooks below are complete for every operation of the contract, so enabling one is deleting its line here.
 * Empty: job creation, history items, the history list, feedback, delete and media (issues 3 and 4) are all on main
 * (commit 06b051a) and pass.
 */
const SKIP_LATER_ISSUE = {};

const UNAVAILABLE =
  'cannot be provoked deterministically: 503 needs PostgreSQL or Redis to fail while the service runs, ' +
  'and every other transaction of this run needs them up';

const EVENT_STREAM =
  'Dredd cannot speak the protocol: it reads an answer to its end and compares it whole, and an event stream ' +
  'is open-ended; test/api/push/events.api-spec.ts reads these streams event by event (first event, changes on any ' +
  'replica, the end after the final state, heartbeats)';

/** Responses that cannot be provoked deterministically against the real service. These stay skipped. */
const SKIP_NOT_PROVOKABLE = {
  'GET /generation/tools 503': UNAVAILABLE,
  'GET /generation/generationTypes 503': UNAVAILABLE,
  'POST /generation/generate_image_v2/ 409':
    'cannot be provoked deterministically: idempotency_in_progress needs a second request with the same ' +
    'Idempotency-Key while the first is still being handled, a race that one sequential client cannot set up',
  'POST /generation/generate_image_v2/ 503': UNAVAILABLE,
  'GET /user/generation-history 503': UNAVAILABLE,
  'GET /user/generation-history/{id} 503': UNAVAILABLE,
  'DELETE /user/generation-history/{id} 503': UNAVAILABLE,
  'PATCH /user/generation-history/feedback/{id} 503': UNAVAILABLE,
  'GET /user/generation-history/{id}/events 200': EVENT_STREAM,
  'GET /user/generation-history/{id}/events 503': UNAVAILABLE,
  'POST /user/generation-history/{id}/cancel 503': UNAVAILABLE,
  'GET /user/events 200': EVENT_STREAM,
  'GET /user/events 503': UNAVAILABLE,
  'GET /user/webhook-secret 503': UNAVAILABLE,
  'POST /files 503': UNAVAILABLE,
  'GET /files/{id} 503': UNAVAILABLE,
  'DELETE /files/{id} 503': UNAVAILABLE,
  'GET /user/usage 503': UNAVAILABLE,
  'POST /user/webhook-secret/rotate 503': UNAVAILABLE,
  'GET /media/{id}/{file} 302':
    'cannot be provoked here: a redirect to the bucket needs STORAGE=s3 with MEDIA_DELIVERY=presigned, and this run ' +
    'stores media on the local disk (test/api/media/presigned.api-spec.ts follows the redirect against s3rver)',
  'GET /health/ready 503':
    'cannot be provoked deterministically: readiness answers 503 only while PostgreSQL or Redis is down or the ' +
    'process shuts down, and every other transaction of this run needs them up and the process serving ' +
    '(test/api/push/rollout.api-spec.ts checks the shutting-down answer)',
};

function operationOf(transaction) {
  return `${transaction.request.method} ${transaction.origin.resourceName}`;
}

function statusOf(transaction) {
  return Number(transaction.expected.statusCode);
}

/** The reason a transaction is skipped and the rule that says so, or undefined when it runs. */
function skipRule(transaction) {
  const operation = operationOf(transaction);
  const response = `${operation} ${statusOf(transaction)}`;
  if (SKIP_NOT_PROVOKABLE[response]) return { rule: response, reason: SKIP_NOT_PROVOKABLE[response] };
  if (SKIP_LATER_ISSUE[response]) return { rule: response, reason: SKIP_LATER_ISSUE[response] };
  if (SKIP_LATER_ISSUE[operation]) return { rule: operation, reason: SKIP_LATER_ISSUE[operation] };
  return undefined;
}

// ---------------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------------

const HOOKED_NAMES = new Set();
const state = {
  /** Set in beforeAll: a real PNG for the `clothes` field. */
  png: undefined,
  setupError: undefined,
  /** The item job creation (202) returned; most later transactions use it. */
  itemId: undefined,
  itemDone: undefined,
  /** A stored file of user 1 (`POST /files`), for the transactions of `/files/{id}`. */
  fileId: undefined,
};

/**
 * Registers a hook for one transaction. The hook may be async; it does not run for skipped transactions
 * (Dredd runs `before` hooks for them too) and, after the request, only when there is a response. Whatever it
 * throws fails the transaction with that message (Dredd drops errors passed to `done`).
 */
function on(stage, name, fn) {
  HOOKED_NAMES.add(name);
  hooks[stage](name, (transaction, done) => {
    if (transaction.skip || (stage !== 'before' && !transaction.real)) return done();
    Promise.resolve()
      .then(() => fn(transaction))
      .catch((error) => addFailure(transaction, error instanceof Error ? error.message : String(error)))
      .finally(() => done());
  });
}

/** Fails the transaction after the fact (Dredd reports `transaction.fail` even when Gavel found nothing). */
function addFailure(transaction, message) {
  transaction.fail = typeof transaction.fail === 'string' ? `${transaction.fail}; ${message}` : message;
}

/** Operations with `security: []` (media, health, contract) are public: they are called without a key. */
function isPublic(transaction) {
  const operation = contract.paths[transaction.origin.resourceName][transaction.request.method.toLowerCase()];
  return Array.isArray(operation.security) && operation.security.length === 0;
}

function setPath(transaction, path) {
  transaction.fullPath = path;
  transaction.request.uri = path;
}

function useKey(transaction, key) {
  transaction.request.headers.Authorization = `Bearer ${key}`;
}

/** Documentation addresses (RFC 5737), one per 429 transaction. */
let nextClientAddress = 1;

/**
 * Sends failed authentications from a fresh client address until the service refuses that address, and makes the
 * transaction come from it too. The 429 of the per-user limits cannot be provoked deterministically (the
 * creation budget is counted per calendar minute, the pending count depends on the worker); this one can, on
 * every operation that needs a key.
 */
async function fromAddressOutOfAuthFailures(transaction) {
  const address = `198.51.100.${nextClientAddress++}`;
  for (let attempt = 0; attempt < 1000; attempt++) {
    const response = await fetch(`${BASE_URL}/generation/tools`, {
      headers: { Authorization: 'Bearer igs_contract-test-wrong-key', 'X-Forwarded-For': address },
    });
    await response.arrayBuffer();
    if (response.status === 429) {
      transaction.request.headers['X-Forwarded-For'] = address;
      return;
    }
    if (response.status !== 401) throw new Error(`a wrong key from ${address} answered ${response.status}, not 401`);
  }
  throw new Error(`1000 failed authentications from ${address} were never refused with 429`);
}

function setJsonBody(transaction, value) {
  transaction.request.headers['Content-Type'] = 'application/json';
  transaction.request.body = JSON.stringify(value);
}

/** A multipart/form-data body built by hand: Dredd sends an empty body for multipart operations. */
function multipart(parts) {
  const boundary = `----igs-contract-${randomUUID()}`;
  const chunks = [];
  for (const part of parts) {
    let head = `--${boundary}\r\nContent-Disposition: form-data; name="${part.name}"`;
    if (part.filename) head += `; filename="${part.filename}"\r\nContent-Type: ${part.contentType}`;
    chunks.push(Buffer.from(`${head}\r\n\r\n`, 'utf8'));
    chunks.push(Buffer.isBuffer(part.value) ? part.value : Buffer.from(String(part.value), 'utf8'));
    chunks.push(Buffer.from('\r\n', 'utf8'));
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`, 'utf8'));
  return { contentType: `multipart/form-data; boundary=${boundary}`, body: Buffer.concat(chunks) };
}

function useMultipart(transaction, parts) {
  const { contentType, body } = multipart(parts);
  transaction.request.headers['Content-Type'] = contentType;
  transaction.request.body = body.toString('base64');
  transaction.request.bodyEncoding = 'base64';
}

function clothesPart(value = state.png) {
  return { name: 'clothes', filename: 'clothes.png', contentType: 'image/png', value };
}

/** The one part of `POST /files`: a real PNG unless another value is given. */
function filePart(value = state.png) {
  return { name: 'file', filename: 'photo.png', contentType: 'image/png', value };
}

/** A stored file of user 1, uploaded outside Dredd once and kept for the transactions that read one. */
async function storedFile() {
  if (state.fileId) return state.fileId;
  const { contentType, body } = multipart([filePart()]);
  const response = await api('POST', '/files', { headers: { 'Content-Type': contentType }, body });
  if (response.status !== 201) throw new Error(`storing a file failed: ${response.status} ${response.text}`);
  state.fileId = JSON.parse(response.text).file_id;
  return state.fileId;
}

/** The form of a valid fashion_card job: a `tool` part and a real PNG in `clothes`. */
function validJobParts() {
  return [{ name: 'tool', value: 'fashion_card' }, clothesPart()];
}

async function api(method, path, { key = API_KEY, headers = {}, body } = {}) {
  const response = await fetch(`${BASE_URL}${path}`, {
    method,
    headers: { Authorization: `Bearer ${key}`, ...headers },
    body,
  });
  const text = await response.text();
  return { status: response.status, text };
}

/** Creates a job for user 1 outside Dredd (for the transactions that consume an item) and returns its id. */
async function createJob() {
  const { contentType, body } = multipart(validJobParts());
  const response = await api('POST', '/generation/generate_image_v2/', {
    headers: { 'Content-Type': contentType },
    body,
  });
  if (response.status !== 202) throw new Error(`creating a job failed: ${response.status} ${response.text}`);
  return JSON.parse(response.text).history_item_id;
}

/**
 * A pending item of user 1 written straight to the database, with no queued job: it stays pending until canceled
 * (the reconciler, which would queue it, first looks after ten seconds).
 */
async function seedPendingItem() {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  try {
    const { rows } = await client.query(
      // User 1 owns the seeded error item.
      `INSERT INTO history_items (id, user_id, tool, generation_type, inputs)
       SELECT $1, user_id, 'fashion_card', 'product_card', '{}' FROM history_items WHERE id = $2
       RETURNING id`,
      [randomUUID(), ERROR_ITEM_ID],
    );
    return rows[0].id;
  } finally {
    await client.end();
  }
}

function requireItem() {
  if (!state.itemId) {
    throw new Error('no history_item_id: the job creation transaction (202) did not run or did not return one');
  }
  return state.itemId;
}

/** Polls user 1's item until it is `complete` (memoised); an `error` or a timeout fails the caller. */
function itemComplete() {
  const id = requireItem();
  state.itemDone ??= (async () => {
    const deadline = Date.now() + JOB_TIMEOUT_MS;
    let last;
    while (Date.now() < deadline) {
      last = await api('GET', `/user/generation-history/${id}`);
      if (last.status !== 200) throw new Error(`polling item ${id}: ${last.status} ${last.text}`);
      const item = JSON.parse(last.text);
      if (item.status === 'complete') return item;
      if (item.status !== 'pending') throw new Error(`item ${id} ended as ${item.status}: ${last.text}`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    throw new Error(`item ${id} was not complete after ${JOB_TIMEOUT_MS} ms: ${last && last.text}`);
  })();
  return state.itemDone;
}

function realBody(transaction) {
  return Buffer.from(transaction.real.body || '', transaction.real.bodyEncoding === 'base64' ? 'base64' : 'utf8');
}

function realJson(transaction) {
  return JSON.parse(realBody(transaction).toString('utf8'));
}

/** Fails the transaction unless the problem document has this `code` (so the right error was provoked). */
function expectProblemCode(name, code) {
  on('beforeValidation', name, (transaction) => {
    let actual;
    try {
      actual = realJson(transaction).code;
    } catch {
      actual = undefined;
    }
    if (actual !== code) throw new Error(`expected problem code ${code}, got ${actual}: ${transaction.real.body}`);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Hooks for every transaction
// ---------------------------------------------------------------------------------------------------------------

hooks.beforeAll((transactions, done) => {
  const names = new Set(transactions.map((t) => t.name));
  const usedRules = new Set();
  const skipped = [];
  for (const transaction of transactions) {
    const skip = skipRule(transaction);
    if (!skip) continue;
    usedRules.add(skip.rule);
    skipped.push({ name: transaction.name, reason: skip.reason });
  }
  const report = {
    total: transactions.length,
    skipped,
    // A rule or hook that matches no transaction is a typo or a stale entry: the Jest test fails on it.
    unusedSkipRules: [...Object.keys(SKIP_LATER_ISSUE), ...Object.keys(SKIP_NOT_PROVOKABLE)].filter(
      (rule) => !usedRules.has(rule),
    ),
    unknownHookNames: [...HOOKED_NAMES].filter((name) => !names.has(name)),
  };
  console.log(`CONTRACT_HOOKS_REPORT ${JSON.stringify(report)}`);
  for (const { name, reason } of skipped) console.log(`skipping: ${name} -- ${reason}`);

  // A real image for job creation (sharp is ESM-compatible from CommonJS through require).
  Promise.resolve()
    .then(() => require('sharp'))
    .then((sharp) =>
      // A garment-like shape on a plain background, so the product-card pipeline has something to cut out.
      sharp(
        Buffer.from(
          '<svg xmlns="http://www.w3.org/2000/svg" width="240" height="320">' +
            '<rect width="100%" height="100%" fill="#f4f4f4"/>' +
            '<rect x="60" y="64" width="120" height="192" fill="#b22234"/></svg>',
        ),
      )
        .png()
        .toBuffer(),
    )
    .then((png) => {
      state.png = png;
    })
    .catch((error) => {
      state.setupError = `preparing the test image failed: ${error instanceof Error ? error.message : error}`;
    })
    .finally(() => done());
});

hooks.beforeEach((transaction) => {
  const skip = skipRule(transaction);
  if (skip) {
    transaction.skip = true;
    return;
  }
  if (state.setupError) addFailure(transaction, state.setupError);

  // Dredd sends the documented example of `Prefer` (wait=30) with every request of an operation that takes it; only
  // the transactions about waiting keep one (set below).
  delete transaction.request.headers.Prefer;

  // 401 transactions and public operations go without a key; the rest authenticate as user 1.
  if (statusOf(transaction) !== 401 && !isPublic(transaction)) useKey(transaction, API_KEY);

  // Dredd only checks the example's keys; the contract's schema checks types, enums, patterns and extra fields.
  const contentType = transaction.expected.headers['Content-Type'];
  if (contentType && /json$/.test(contentType)) {
    const schema = contractSchema.responseSchema(
      contract,
      transaction.request.method,
      transaction.origin.resourceName,
      statusOf(transaction),
      contentType,
    );
    if (!schema) throw new Error(`no schema in the contract for ${transaction.name}`);
    transaction.expected.bodySchema = { $schema: 'http://json-schema.org/draft-07/schema#', ...schema };
  }
});

const CHARSET_UTF8 = /^(application\/(?:json|problem\+json|yaml))\s*;\s*charset=utf-8$/i;

hooks.beforeEachValidation((transaction) => {
  if (!transaction.real) return;
  const headers = transaction.real.headers;
  // Dredd compares Content-Type exactly; `; charset=utf-8` (only that parameter) is what Express adds.
  const contentType = headers['content-type'];
  if (contentType && CHARSET_UTF8.test(contentType)) headers['content-type'] = contentType.replace(CHARSET_UTF8, '$1');

  const problems = [];
  if (!headers['x-request-id']) problems.push('no X-Request-Id header (the contract promises one on every response)');
  // Values of documented headers (Dredd only checks that they are present).
  const documented = contractSchema.documentedResponse(
    contract,
    transaction.request.method,
    transaction.origin.resourceName,
    Number(transaction.real.statusCode),
  );
  for (const [name, header] of Object.entries((documented && documented.headers) || {})) {
    const schema = contractSchema.toJsonSchema(contract, header).schema || {};
    const value = headers[name.toLowerCase()];
    if (value === undefined) continue; // Dredd reports missing headers itself.
    if (schema.enum && !schema.enum.includes(value))
      problems.push(`${name}: "${value}" is not one of ${schema.enum.join(' | ')}`);
    if (schema.type === 'integer' && !(/^\d+$/.test(value) && Number(value) >= (schema.minimum ?? 0))) {
      problems.push(`${name}: "${value}" is not an integer >= ${schema.minimum ?? 0}`);
    }
    if (schema.pattern && !new RegExp(schema.pattern).test(value)) {
      problems.push(`${name}: "${value}" does not match ${schema.pattern}`);
    }
  }
  // The 401 transactions send no key at all (the contract says that answer is exactly `Bearer`), but for media,
  // which takes no key as well and so sends a wrong one.
  const expectedChallenge = transaction.request.headers.Authorization ? 'Bearer error="invalid_token"' : 'Bearer';
  if (statusOf(transaction) === 401 && headers['www-authenticate'] !== expectedChallenge) {
    problems.push(`WWW-Authenticate is "${headers['www-authenticate']}", expected "${expectedChallenge}"`);
  }
  for (const problem of problems) addFailure(transaction, problem);
});

// ---------------------------------------------------------------------------------------------------------------
// Hooks per transaction, in the contract's (and Dredd's) order
// ---------------------------------------------------------------------------------------------------------------

// Every operation that needs a key: 429 once the client address used up its failed authentications, even with
// user 1's valid key.
const TOOLS = '/generation/tools > List available tools';
const TYPES = '/generation/generationTypes > List the generation types of a tool';
const CREATE = '/generation/generate_image_v2/ > Create a generation job';
const LIST = "/user/generation-history > List the caller's history items";
const READ = '/user/generation-history/{id} > Read one history item (poll a job)';
const DELETE = '/user/generation-history/{id} > Delete a history item';
const FEEDBACK = '/user/generation-history/feedback/{id} > Give feedback on a history item';
const EVENTS = '/user/generation-history/{id}/events > Follow one history item as an event stream';
const CANCEL = '/user/generation-history/{id}/cancel > Cancel a pending job';
const USER_EVENTS = "/user/events > Follow all of the caller's history items as an event stream";
const SECRET = "/user/webhook-secret > The caller's webhook signing secret";
const ROTATE = "/user/webhook-secret/rotate > Replace the caller's webhook signing secret";
const FILES = '/files > Store an image to name in later jobs';
const FILE_READ = "/files/{id} > Read a stored file's description";
const FILE_DELETE = '/files/{id} > Delete a stored file';
const USAGE = "/user/usage > The caller's limits and usage";
const RATE_LIMITED_REQUESTS = {
  [TOOLS]: () => {},
  [TYPES]: (t) => setPath(t, '/generation/generationTypes?tool=default'),
  [CREATE]: (t) => {
    delete t.request.headers['Idempotency-Key'];
    useMultipart(t, validJobParts());
  },
  [LIST]: () => {},
  [READ]: (t) => setPath(t, `/user/generation-history/${requireItem()}`),
  [DELETE]: (t) => setPath(t, `/user/generation-history/${requireItem()}`),
  [FEEDBACK]: (t) => {
    setPath(t, `/user/generation-history/feedback/${requireItem()}`);
    setJsonBody(t, { like: true });
  },
  [EVENTS]: (t) => setPath(t, `/user/generation-history/${requireItem()}/events`),
  [CANCEL]: (t) => setPath(t, `/user/generation-history/${requireItem()}/cancel`),
  [USER_EVENTS]: () => {},
  [SECRET]: () => {},
  [ROTATE]: () => {},
  [FILES]: (t) => useMultipart(t, [filePart()]),
  [FILE_READ]: async (t) => setPath(t, `/files/${await storedFile()}`),
  [FILE_DELETE]: async (t) => setPath(t, `/files/${await storedFile()}`),
  [USAGE]: () => {},
};
for (const [operation, prepare] of Object.entries(RATE_LIMITED_REQUESTS)) {
  on('before', `${operation} > 429 > application/problem+json`, async (t) => {
    await prepare(t);
    await fromAddressOutOfAuthFailures(t);
  });
  expectProblemCode(`${operation} > 429 > application/problem+json`, 'rate_limited');
}

// GET /generation/generationTypes
on(
  'before',
  '/generation/generationTypes > List the generation types of a tool > 400 > application/problem+json',
  (t) => setPath(t, '/generation/generationTypes'),
);
expectProblemCode(
  '/generation/generationTypes > List the generation types of a tool > 400 > application/problem+json',
  'validation_failed',
);
on(
  'before',
  '/generation/generationTypes > List the generation types of a tool > 404 > application/problem+json',
  (t) => setPath(t, '/generation/generationTypes?tool=hat_swap'),
);
expectProblemCode(
  '/generation/generationTypes > List the generation types of a tool > 404 > application/problem+json',
  'not_found',
);

// POST /generation/generate_image_v2/ (Dredd would send an empty multipart body: every transaction builds its own)
on('before', `${CREATE} > 200 > application/json`, (t) => {
  useMultipart(t, validJobParts());
  delete t.request.headers['Idempotency-Key'];
  t.request.headers.Prefer = 'wait=30'; // the worker finishes a product card well within that
});
on('beforeValidation', `${CREATE} > 200 > application/json`, (t) => {
  if (realJson(t).status !== 'complete') throw new Error(`the job did not complete while waiting: ${t.real.body}`);
  if (t.real.headers['preference-applied'] !== 'wait=30') {
    throw new Error(`Preference-Applied is "${t.real.headers['preference-applied']}", expected wait=30`);
  }
});
/** Whether Dredd made this transaction from the JSON request body (the operation takes a form and JSON alike). */
function sendsJson(t) {
  return /^application\/json/.test(t.request.headers['Content-Type'] || '');
}
on('before', `${CREATE} > 202 > application/json`, async (t) => {
  // With a seed, which the local engine takes (and ignores), and the one result it makes.
  if (sendsJson(t))
    setJsonBody(t, { tool: 'fashion_card', inputs: { clothes: await storedFile() }, seed: 7, num_outputs: 1 });
  else useMultipart(t, [...validJobParts(), { name: 'seed', value: '7' }, { name: 'num_outputs', value: '1' }]);
  t.request.headers['Idempotency-Key'] = randomUUID();
});
on('after', `${CREATE} > 202 > application/json`, (t) => {
  const body = realJson(t);
  state.itemId = body.history_item_id;
  const location = t.real.headers.location;
  if (location !== `/user/generation-history/${body.history_item_id}`) {
    throw new Error(`Location is "${location}", expected /user/generation-history/${body.history_item_id}`);
  }
});
// The error transactions send no Idempotency-Key: the example key with other payloads would answer 422 reused.
on('before', `${CREATE} > 400 > application/problem+json`, (t) => {
  delete t.request.headers['Idempotency-Key'];
  // The required image `clothes` is missing.
  if (sendsJson(t)) setJsonBody(t, { tool: 'fashion_card', inputs: {} });
  else useMultipart(t, [{ name: 'tool', value: 'fashion_card' }]);
});
expectProblemCode(`${CREATE} > 400 > application/problem+json`, 'validation_failed');
on('before', `${CREATE} > 401 > application/problem+json`, (t) => {
  delete t.request.headers['Idempotency-Key'];
  useMultipart(t, validJobParts());
});
expectProblemCode(`${CREATE} > 401 > application/problem+json`, 'unauthorized');
on('before', `${CREATE} > 413 > application/problem+json`, (t) => {
  delete t.request.headers['Idempotency-Key'];
  // One byte over the documented 10 MiB per file (the service drains the rest of the upload after answering).
  const oversized = Buffer.concat([state.png, Buffer.alloc(10 * 1024 * 1024 + 1 - state.png.length)]);
  useMultipart(t, [{ name: 'tool', value: 'fashion_card' }, clothesPart(oversized)]);
});
expectProblemCode(`${CREATE} > 413 > application/problem+json`, 'payload_too_large');
on('before', `${CREATE} > 415 > application/problem+json`, (t) => {
  delete t.request.headers['Idempotency-Key'];
  const notAnImage = Buffer.from('This is plain text, not a JPEG, PNG or WebP image.\n'.repeat(40), 'utf8');
  useMultipart(t, [{ name: 'tool', value: 'fashion_card' }, clothesPart(notAnImage)]);
});
expectProblemCode(`${CREATE} > 415 > application/problem+json`, 'unsupported_media_type');
on('before', `${CREATE} > 422 > application/problem+json`, (t) => {
  delete t.request.headers['Idempotency-Key'];
  useMultipart(t, [{ name: 'tool', value: 'hat_swap' }, clothesPart()]);
});
expectProblemCode(`${CREATE} > 422 > application/problem+json`, 'unknown_tool');
on('before', `${CREATE} > 404 > application/problem+json`, (t) => {
  delete t.request.headers['Idempotency-Key'];
  // A JSON job naming a stored file that does not exist (or is another user's: the same answer).
  setJsonBody(t, { tool: 'fashion_card', inputs: { clothes: 'file_00000000000000000000000000000000' } });
});
expectProblemCode(`${CREATE} > 404 > application/problem+json`, 'not_found');

// GET /user/generation-history (all of user 1's items: the job above and the seeded error item)
on('before', `${LIST} > 200 > application/json`, (t) => setPath(t, '/user/generation-history?page=1&limit=20'));
on('beforeValidation', `${LIST} > 200 > application/json`, (t) => {
  const ids = realJson(t).items.map((item) => item.history_item_id);
  for (const id of [requireItem(), ERROR_ITEM_ID]) {
    if (!ids.includes(id)) throw new Error(`item ${id} of this user is missing from the list`);
  }
});
on('before', `${LIST} > 400 > application/problem+json`, (t) => setPath(t, '/user/generation-history?limit=0'));
expectProblemCode(`${LIST} > 400 > application/problem+json`, 'validation_failed');

// GET /user/generation-history/{id}
on('before', `${READ} > 200 > application/json`, (t) => {
  setPath(t, `/user/generation-history/${requireItem()}`);
  t.request.headers.Prefer = 'wait=30'; // answered as soon as the job above is final, with Preference-Applied
});
on('beforeValidation', `${READ} > 200 > application/json`, (t) => {
  if (realJson(t).status === 'pending') throw new Error(`Prefer: wait=30 answered a pending item: ${t.real.body}`);
});
on('before', `${READ} > 400 > application/problem+json`, (t) => setPath(t, '/user/generation-history/not-a-uuid'));
expectProblemCode(`${READ} > 400 > application/problem+json`, 'validation_failed');
on('before', `${READ} > 401 > application/problem+json`, (t) =>
  setPath(t, `/user/generation-history/${requireItem()}`),
);
on('before', `${READ} > 404 > application/problem+json`, (t) => {
  setPath(t, `/user/generation-history/${requireItem()}`);
  useKey(t, OTHER_API_KEY); // user 1's item asked for by user 2
});
expectProblemCode(`${READ} > 404 > application/problem+json`, 'not_found');

// GET /user/generation-history/{id}/events (the 200 stream is skipped above: see EVENT_STREAM)
on('before', `${EVENTS} > 400 > application/problem+json`, (t) =>
  setPath(t, '/user/generation-history/not-a-uuid/events'),
);
expectProblemCode(`${EVENTS} > 400 > application/problem+json`, 'validation_failed');
on('before', `${EVENTS} > 401 > application/problem+json`, (t) =>
  setPath(t, `/user/generation-history/${requireItem()}/events`),
);
on('before', `${EVENTS} > 404 > application/problem+json`, (t) => {
  setPath(t, `/user/generation-history/${requireItem()}/events`);
  useKey(t, OTHER_API_KEY);
});
expectProblemCode(`${EVENTS} > 404 > application/problem+json`, 'not_found');

// POST /user/generation-history/{id}/cancel (200 cancels a pending item seeded for it: no worker ever takes it)
on('before', `${CANCEL} > 200 > application/json`, async (t) =>
  setPath(t, `/user/generation-history/${await seedPendingItem()}/cancel`),
);
on('beforeValidation', `${CANCEL} > 200 > application/json`, (t) => {
  const item = realJson(t);
  if (item.status !== 'error' || !item.error || item.error.code !== 'canceled') {
    throw new Error(`the canceled item is not error/canceled: ${t.real.body}`);
  }
});
on('before', `${CANCEL} > 400 > application/problem+json`, (t) =>
  setPath(t, '/user/generation-history/not-a-uuid/cancel'),
);
expectProblemCode(`${CANCEL} > 400 > application/problem+json`, 'validation_failed');
on('before', `${CANCEL} > 401 > application/problem+json`, (t) =>
  setPath(t, `/user/generation-history/${requireItem()}/cancel`),
);
on('before', `${CANCEL} > 404 > application/problem+json`, (t) => {
  setPath(t, `/user/generation-history/${requireItem()}/cancel`);
  useKey(t, OTHER_API_KEY);
});
expectProblemCode(`${CANCEL} > 404 > application/problem+json`, 'not_found');
on('before', `${CANCEL} > 409 > application/problem+json`, (t) =>
  setPath(t, `/user/generation-history/${ERROR_ITEM_ID}/cancel`),
);
expectProblemCode(`${CANCEL} > 409 > application/problem+json`, 'not_pending');

// GET /user/events (the 200 stream is skipped above: see EVENT_STREAM)
expectProblemCode(`${USER_EVENTS} > 401 > application/problem+json`, 'unauthorized');

// POST /files, GET /files/{id}, DELETE /files/{id} (multipart built here, as for job creation)
on('before', `${FILES} > 201 > application/json`, (t) => useMultipart(t, [filePart()]));
on('after', `${FILES} > 201 > application/json`, (t) => {
  const body = realJson(t);
  state.fileId = body.file_id;
  if (t.real.headers.location !== `/files/${body.file_id}`) {
    throw new Error(`Location is "${t.real.headers.location}", expected /files/${body.file_id}`);
  }
});
on('before', `${FILES} > 400 > application/problem+json`, (t) =>
  useMultipart(t, [filePart(), { name: 'note', value: 'not a field of a stored file' }]),
);
expectProblemCode(`${FILES} > 400 > application/problem+json`, 'unexpected_field');
on('before', `${FILES} > 401 > application/problem+json`, (t) => useMultipart(t, [filePart()]));
expectProblemCode(`${FILES} > 401 > application/problem+json`, 'unauthorized');
on('before', `${FILES} > 413 > application/problem+json`, (t) =>
  useMultipart(t, [filePart(Buffer.concat([state.png, Buffer.alloc(10 * 1024 * 1024 + 1 - state.png.length)]))]),
);
expectProblemCode(`${FILES} > 413 > application/problem+json`, 'payload_too_large');
on('before', `${FILES} > 415 > application/problem+json`, (t) =>
  useMultipart(t, [filePart(Buffer.from('Plain text, not a JPEG, PNG or WebP image.\n'.repeat(40), 'utf8'))]),
);
expectProblemCode(`${FILES} > 415 > application/problem+json`, 'unsupported_media_type');
on('before', `${FILES} > 422 > application/problem+json`, async (t) => {
  const sharp = require('sharp');
  const tiny = await sharp({ create: { width: 8, height: 8, channels: 3, background: '#808080' } })
    .png()
    .toBuffer();
  useMultipart(t, [filePart(tiny)]);
});
expectProblemCode(`${FILES} > 422 > application/problem+json`, 'image_too_small');
on('before', `${FILE_READ} > 200 > application/json`, async (t) => setPath(t, `/files/${await storedFile()}`));
on('before', `${FILE_READ} > 401 > application/problem+json`, async (t) => setPath(t, `/files/${await storedFile()}`));
expectProblemCode(`${FILE_READ} > 401 > application/problem+json`, 'unauthorized');
on('before', `${FILE_READ} > 404 > application/problem+json`, async (t) => {
  setPath(t, `/files/${await storedFile()}`);
  useKey(t, OTHER_API_KEY); // user 1's file asked for by user 2
});
expectProblemCode(`${FILE_READ} > 404 > application/problem+json`, 'not_found');
// 204 deletes a file of its own, so user 1's file lives on for the transactions after it.
on('before', `${FILE_DELETE} > 204`, async (t) => {
  const { contentType, body } = multipart([filePart()]);
  const response = await api('POST', '/files', { headers: { 'Content-Type': contentType }, body });
  if (response.status !== 201) throw new Error(`storing a file failed: ${response.status} ${response.text}`);
  setPath(t, `/files/${JSON.parse(response.text).file_id}`);
});
on('before', `${FILE_DELETE} > 401 > application/problem+json`, async (t) =>
  setPath(t, `/files/${await storedFile()}`),
);
expectProblemCode(`${FILE_DELETE} > 401 > application/problem+json`, 'unauthorized');
on('before', `${FILE_DELETE} > 404 > application/problem+json`, async (t) => {
  setPath(t, `/files/${await storedFile()}`);
  useKey(t, OTHER_API_KEY);
});
expectProblemCode(`${FILE_DELETE} > 404 > application/problem+json`, 'not_found');

// GET /user/webhook-secret and POST /user/webhook-secret/rotate
on('beforeValidation', `${ROTATE} > 200 > application/json`, async (t) => {
  const current = await api('GET', '/user/webhook-secret');
  if (JSON.parse(current.text).secret !== realJson(t).secret) {
    throw new Error(`after a rotation GET /user/webhook-secret answers another secret: ${current.text}`);
  }
});
expectProblemCode(`${SECRET} > 401 > application/problem+json`, 'unauthorized');

// GET /user/usage: user 1 created product cards above (the contract's order), so this month counts them.
on('beforeValidation', `${USAGE} > 200 > application/json`, (t) => {
  const { month } = realJson(t);
  if (!(month.jobs >= 1 && month.by_tool.fashion_card !== undefined)) {
    throw new Error(`the month does not count the jobs this run created: ${t.real.body}`);
  }
});
expectProblemCode(`${USAGE} > 401 > application/problem+json`, 'unauthorized');
expectProblemCode(`${ROTATE} > 401 > application/problem+json`, 'unauthorized');

// DELETE /user/generation-history/{id} (204 deletes a job of its own, so user 1's item lives on for feedback)
on('before', `${DELETE} > 204`, async (t) => setPath(t, `/user/generation-history/${await createJob()}`));
on('before', `${DELETE} > 400 > application/problem+json`, (t) => setPath(t, '/user/generation-history/not-a-uuid'));
expectProblemCode(`${DELETE} > 400 > application/problem+json`, 'validation_failed');
on('before', `${DELETE} > 401 > application/problem+json`, (t) =>
  setPath(t, `/user/generation-history/${requireItem()}`),
);
on('before', `${DELETE} > 404 > application/problem+json`, (t) => {
  setPath(t, `/user/generation-history/${requireItem()}`);
  useKey(t, OTHER_API_KEY);
});
expectProblemCode(`${DELETE} > 404 > application/problem+json`, 'not_found');

// PATCH /user/generation-history/feedback/{id}
on('before', `${FEEDBACK} > 200 > application/json`, async (t) => {
  await itemComplete(); // feedback is accepted on complete items only
  setPath(t, `/user/generation-history/feedback/${requireItem()}`);
  setJsonBody(t, { like: true });
});
on('beforeValidation', `${FEEDBACK} > 200 > application/json`, (t) => {
  if (realJson(t).like !== true) throw new Error(`like is not true after feedback: ${t.real.body}`);
});
on('before', `${FEEDBACK} > 400 > application/problem+json`, (t) => {
  setPath(t, `/user/generation-history/feedback/${requireItem()}`);
  setJsonBody(t, { like: 'yes' });
});
expectProblemCode(`${FEEDBACK} > 400 > application/problem+json`, 'validation_failed');
on('before', `${FEEDBACK} > 401 > application/problem+json`, (t) =>
  setPath(t, `/user/generation-history/feedback/${requireItem()}`),
);
on('before', `${FEEDBACK} > 413 > application/problem+json`, (t) => {
  setPath(t, `/user/generation-history/feedback/${requireItem()}`);
  setJsonBody(t, { like: true, padding: 'x'.repeat(200 * 1024) }); // over the documented 100 KB
});
expectProblemCode(`${FEEDBACK} > 413 > application/problem+json`, 'payload_too_large');
on('before', `${FEEDBACK} > 404 > application/problem+json`, (t) => {
  setPath(t, `/user/generation-history/feedback/${requireItem()}`);
  useKey(t, OTHER_API_KEY);
});
expectProblemCode(`${FEEDBACK} > 404 > application/problem+json`, 'not_found');
on(
  'before',
  `${FEEDBACK} > 409 > application/problem+json`,
  (t) => setPath(t, `/user/generation-history/feedback/${ERROR_ITEM_ID}`), // seeded with status `error`
);
expectProblemCode(`${FEEDBACK} > 409 > application/problem+json`, 'not_complete');

// GET /media/{id}/{file}: the results of user 1's job, checked by their bytes (Dredd can only diff text)
const MEDIA = '/media/{id}/{file} > Download a result image';
const IMAGE_CHECKS = {
  'preview.webp': async (bytes) => {
    if (bytes.subarray(0, 4).toString('latin1') !== 'RIFF' || bytes.subarray(8, 12).toString('latin1') !== 'WEBP') {
      throw new Error('preview.webp is not a WebP image');
    }
    const { width, height } = await require('sharp')(bytes).metadata();
    if (Math.max(width, height) > 512) throw new Error(`preview is ${width}x${height}, more than 512 px on a side`);
  },
  'stock.jpg': async (bytes) => {
    if (!(bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff))
      throw new Error('stock.jpg is not a JPEG image');
  },
};
for (const [contentType, file] of [
  ['image/webp', 'preview.webp'],
  ['image/jpeg', 'stock.jpg'],
]) {
  const name = `${MEDIA} > 200 > ${contentType}`;
  on('before', name, async (t) => {
    const item = await itemComplete();
    const path = file === 'preview.webp' ? item.preview_url : item.stock_url;
    if (!path.startsWith(`media/${item.history_item_id}/${file}?expires=`))
      throw new Error(`unexpected media path ${path}`);
    // The signed URL alone, as an <img> sends it: no key.
    delete t.request.headers.Authorization;
    setPath(t, `/${path}`);
  });
  on('beforeValidation', name, async (t) => {
    await IMAGE_CHECKS[file](realBody(t));
    t.expected.body = t.real.body; // the bytes were checked above; Dredd would diff them against an empty example
  });
}
on('before', `${MEDIA} > 401 > application/problem+json`, (t) => {
  // A key that is sent is checked, whatever the signature: without one, the answer is about the URL (403).
  useKey(t, 'igs_contract-test-wrong-key');
});
expectProblemCode(`${MEDIA} > 401 > application/problem+json`, 'unauthorized');
on('before', `${MEDIA} > 403 > application/problem+json`, async (t) => {
  const item = await itemComplete();
  delete t.request.headers.Authorization;
  setPath(t, `/media/${item.history_item_id}/stock.jpg`); // no signature
});
expectProblemCode(`${MEDIA} > 403 > application/problem+json`, 'media_url_invalid');
on('before', `${MEDIA} > 404 > application/problem+json`, (t) => {
  // The owner's key (user 1's, as every transaction sends) on an item that does not exist.
  setPath(t, `/media/${randomUUID()}/preview.webp`);
});
expectProblemCode(`${MEDIA} > 404 > application/problem+json`, 'not_found');

// Contract endpoints: the very document this run reads, naming as its server the service as Dredd reached it.
const servedOrigin = (t) => `${t.protocol}//${t.host}:${t.port}`;
on('beforeValidation', '/openapi.json > This contract as JSON > 200 > application/json', (t) => {
  const expected = { ...contract, servers: [{ url: servedOrigin(t), description: 'This service' }] };
  if (JSON.stringify(realJson(t)) !== JSON.stringify(expected))
    throw new Error('/openapi.json is not openapi/openapi.yaml with this service as its server');
});
on('beforeValidation', '/openapi.yaml > This contract as YAML > 200 > application/yaml', (t) => {
  // Exact text comparison by Dredd: the file byte for byte, but for its servers block.
  t.expected.body = readFileSync(CONTRACT_FILE, 'utf8').replace(
    /^servers:\n(?:[ -].*\n)+/m,
    `servers:\n  - url: ${JSON.stringify(servedOrigin(t))}\n    description: This service\n`,
  );
});
