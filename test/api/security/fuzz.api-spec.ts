import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import contractSchema from '../../support/contract-schema.cjs';
import { expectMatchesContract } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { makeImage } from '../../support/jobs.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { completeItems } from '../../support/history.js';

/**
 * Requests generated from the contract, valid and broken, for every operation: no answer is a 5xx, and every
 * answer is one the contract documents for the operation (status, content type, body schema).
 */
const SEED = 20_260_521;
const RUNS_PER_OPERATION = 300;

type Json = Record<string, unknown>;
type Schema = Json & { type?: string | string[]; enum?: unknown[]; format?: string };

const contract = contractSchema.loadContract() as Json & { paths: Record<string, Record<string, Json>> };
const HTTP_METHODS = ['get', 'post', 'put', 'patch', 'delete'];

interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header';
  required?: boolean;
  schema: Schema;
}

interface Operation {
  id: string;
  method: string;
  template: string;
  parameters: Parameter[];
  requestBody?: Record<string, { schema: Schema; examples?: Record<string, { value: Json }> }>;
}

function resolve<T>(node: unknown): T {
  const ref = (node as { $ref?: string }).$ref;
  return (ref ? contractSchema.toJsonSchema(contract, node) : node) as T;
}

/** Every operation of the contract, with its path-level and own parameters resolved. */
function contractOperations(): Operation[] {
  const operations: Operation[] = [];
  for (const [template, pathItem] of Object.entries(contract.paths)) {
    for (const method of HTTP_METHODS.filter((m) => pathItem[m])) {
      const operation = pathItem[method] as Json & { parameters?: unknown[]; requestBody?: { content: Json } };
      const parameters = [
        ...((pathItem.parameters as unknown as unknown[]) ?? []),
        ...(operation.parameters ?? []),
      ].map((p) => resolve<Parameter>(p));
      const requestBody = operation.requestBody?.content as Operation['requestBody'];
      operations.push({
        id: operation.operationId as string,
        method: method.toUpperCase(),
        template,
        parameters,
        requestBody,
      });
    }
  }
  return operations;
}

// ---------------------------------------------------------------------------------------------------------------
// Values: valid from a schema, and broken
// ---------------------------------------------------------------------------------------------------------------

/** A value the schema accepts (for the schemas this contract uses: enums, strings, integers, booleans, objects). */
function validValue(schema: Schema): fc.Arbitrary<unknown> {
  if (schema.enum) return fc.constantFrom(...schema.enum);
  const types = Array.isArray(schema.type) ? schema.type : [schema.type ?? 'string'];
  return fc.oneof(
    ...types.map((type): fc.Arbitrary<unknown> => {
      switch (type) {
        case 'null':
          return fc.constant(null);
        case 'boolean':
          return fc.boolean();
        case 'integer':
          return fc.integer({ min: (schema.minimum as number) ?? -1e6, max: (schema.maximum as number) ?? 1e6 });
        case 'object': {
          const properties = (schema.properties ?? {}) as Record<string, Schema>;
          const model = Object.fromEntries(Object.entries(properties).map(([name, p]) => [name, validValue(p)]));
          return fc.record(model, { requiredKeys: (schema.required as string[]) ?? [] });
        }
        default:
          if (schema.format === 'uuid') return fc.uuid();
          return fc.string({
            minLength: (schema.minLength as number) ?? 0,
            maxLength: Math.min((schema.maxLength as number) ?? 40, 40),
          });
      }
    }),
  );
}

/** Strings a careless or hostile client sends: unicode, dots, broken escapes, numbers of every kind, huge ones. */
const hostileString = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 30 }),
  fc.string({ unit: 'binary', maxLength: 30 }),
  fc.constantFrom(
    '',
    ' ',
    '.',
    '..',
    '../..',
    '..\\..',
    '%',
    '%00',
    '%E0%A4%A',
    '0',
    '-1',
    '1.5',
    '1e3',
    '0x10',
    'NaN',
    'Infinity',
    '9'.repeat(40),
    'true',
    'null',
    '[]',
    '{}',
    '__proto__',
    'constructor',
    'toString',
    'ℵ',
    '😀',
    'x'.repeat(3000),
    '3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c4',
    '3F6C1D2E-8A4B-4C7E-9F21-5B0D7E9A1C44',
    "' OR 1=1 --",
    '<script>',
  ),
  fc.integer().map(String),
  fc.double().map(String),
);

/** What fetch can put in a header: printable ASCII and Latin-1 (it refuses CR, LF, NUL and wider characters). */
const headerValue = fc.string({
  unit: fc
    .oneof(fc.integer({ min: 0x20, max: 0x7e }), fc.integer({ min: 0xa0, max: 0xff }))
    .map((c) => String.fromCharCode(c)),
  maxLength: 300,
});

/**
 * A path segment as sent: encoded (dots too, so the client does not resolve `..` itself), or one of a few
 * escapes that are not valid percent-encoding. Never empty: that would be another route.
 */
function pathSegment(parameter: Parameter, known: string[]): fc.Arbitrary<string> {
  const encode = (value: unknown) => encodeURIComponent(String(value)).replace(/\./g, '%2E');
  return fc
    .oneof(
      { weight: 3, arbitrary: validValue(parameter.schema).map(encode) },
      { weight: known.length > 0 ? 3 : 0, arbitrary: fc.constantFrom(...(known.length > 0 ? known : ['x'])) },
      { weight: 3, arbitrary: hostileString.map(encode) },
      { weight: 1, arbitrary: fc.constantFrom('%', '%zz', '%E0%A4%A', '%2e%2e', '..%2F..%2Fetc') },
    )
    .filter((segment) => segment !== '');
}

/** A query parameter absent, valid, broken, or repeated. */
function queryValues(parameter: Parameter): fc.Arbitrary<[string, string][]> {
  const one = fc.oneof(validValue(parameter.schema).map(String), hostileString);
  return fc.oneof(
    fc.constant<[string, string][]>([]),
    one.map((value): [string, string][] => [[parameter.name, value]]),
    fc
      .array(one, { minLength: 2, maxLength: 3 })
      .map((values) => values.map((v): [string, string] => [parameter.name, v])),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------------------------------

type Part = { name: string; text: string } | { name: string; bytes: Uint8Array; filename: string; type: string };

/** A request as plain data, so fast-check can print and shrink it. */
interface FuzzRequest {
  path: string;
  headers: Record<string, string>;
  body?: { kind: 'text'; contentType: string; text: string } | { kind: 'form'; parts: Part[] };
}

interface Fixtures {
  keys: string[];
  images: Buffer[];
  /** Ids that exist: the user's complete items (for path parameters named `id`). */
  itemIds: string[];
}

/** Authorization headers as a fuzzer sends them (raw requests: most are what no client would send). */
function authorization(keys: string[]): fc.Arbitrary<Record<string, string>> {
  return fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom(...keys).map((key) => ({ Authorization: `Bearer ${key}` })) },
    { weight: 1, arbitrary: fc.constant({}) },
    { weight: 1, arbitrary: headerValue.map((value) => ({ Authorization: value })) },
    { weight: 1, arbitrary: headerValue.map((value) => ({ Authorization: `Bearer ${value}` })) },
  );
}

function jsonBody(schema: Schema): fc.Arbitrary<FuzzRequest['body']> {
  const json = (value: unknown) => ({
    kind: 'text' as const,
    contentType: 'application/json',
    text: JSON.stringify(value),
  });
  const properties = Object.keys(schema.properties ?? {});
  return fc.oneof(
    { weight: 3, arbitrary: validValue(schema).map(json) },
    // Near-valid: the right field with any value, an extra field, a field missing.
    {
      weight: 2,
      arbitrary: fc.jsonValue().map((value) => json(Object.fromEntries(properties.map((p) => [p, value])))),
    },
    {
      weight: 2,
      arbitrary: fc
        .tuple(validValue(schema), fc.string({ maxLength: 10 }), fc.jsonValue())
        .map(([valid, extra, value]) => json({ ...(valid as Json), [extra]: value })),
    },
    { weight: 1, arbitrary: fc.constant(json({})) },
    { weight: 2, arbitrary: fc.jsonValue().map(json) },
    {
      weight: 1,
      arbitrary: fc.string().map((text) => ({ kind: 'text' as const, contentType: 'application/json', text })),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant('text' as const),
        contentType: fc.constantFrom(
          'text/plain',
          'application/x-www-form-urlencoded',
          'application/json; charset=latin1',
          'application/xml',
        ),
        text: fc.string(),
      }),
    },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
}

/**
 * Multipart bodies from the form's schema: the contract's examples with real images in their binary fields,
 * and parts of every kind (known and unknown names, text and small random files) in any number and order.
 */
function formBody(schema: Schema, examples: Json[], images: Buffer[]): fc.Arbitrary<FuzzRequest['body']> {
  const properties = (schema.properties ?? {}) as Record<string, Schema>;
  const names = Object.keys(properties);
  const isFile = (name: string) => properties[name]?.format === 'binary';
  const image = fc
    .constantFrom(...images)
    .map((bytes) => ({ bytes: new Uint8Array(bytes), filename: 'photo.png', type: 'image/png' }));
  const randomFile = fc.record({
    bytes: fc.uint8Array({ maxLength: 2048 }),
    filename: fc.oneof(fc.constant('photo.jpg'), hostileString),
    type: fc.constantFrom('image/jpeg', 'image/png', 'application/octet-stream', 'text/plain'),
  });
  const exampleForm = fc
    .constantFrom(...examples)
    .chain((example) =>
      fc.tuple(
        ...Object.keys(example).map((name) =>
          isFile(name)
            ? image.map((file): Part => ({ name, ...file }))
            : fc.constant<Part>({ name, text: String(example[name]) }),
        ),
      ),
    );
  const anyPart: fc.Arbitrary<Part> = fc.oneof(
    fc
      .tuple(fc.constantFrom(...names), fc.oneof(validValue({ type: 'string' }).map(String), hostileString))
      .map(([name, text]) => ({ name, text })),
    fc
      .tuple(fc.constantFrom(...names.filter(isFile)), fc.oneof(image, randomFile))
      .map(([name, file]) => ({ name, ...file })),
    fc.tuple(hostileString, hostileString).map(([name, text]) => ({ name, text })),
    fc.tuple(hostileString, randomFile).map(([name, file]) => ({ name, ...file })),
  );
  return fc.oneof(
    { weight: 2, arbitrary: exampleForm.map((parts) => ({ kind: 'form' as const, parts })) },
    {
      weight: 2,
      arbitrary: fc
        .tuple(exampleForm, anyPart)
        .map(([parts, extra]) => ({ kind: 'form' as const, parts: [...parts, extra] })),
    },
    { weight: 4, arbitrary: fc.array(anyPart, { maxLength: 12 }).map((parts) => ({ kind: 'form' as const, parts })) },
    { weight: 1, arbitrary: fc.constant(undefined) },
    {
      weight: 1,
      arbitrary: fc.string().map((text) => ({ kind: 'text' as const, contentType: 'application/json', text })),
    },
  );
}

function requests(operation: Operation, fixtures: Fixtures): fc.Arbitrary<FuzzRequest> {
  const segments = operation.parameters
    .filter((p) => p.in === 'path')
    .map((p) =>
      pathSegment(p, p.name === 'id' ? fixtures.itemIds : p.name === 'file' ? ['preview.webp', 'stock.jpg'] : []),
    );
  const query = operation.parameters.filter((p) => p.in === 'query').map(queryValues);
  const extraQuery = fc.array(fc.tuple(hostileString, hostileString), { maxLength: 2 });
  const headers = operation.parameters
    .filter((p) => p.in === 'header')
    .map((p) =>
      fc
        .option(
          fc.oneof(
            validValue(p.schema).map(String),
            headerValue,
            fc.string({ minLength: 250, maxLength: 260, unit: 'grapheme-ascii' }),
          ),
          { nil: undefined },
        )
        .map((value): Record<string, string> => (value === undefined ? {} : { [p.name]: value })),
    );
  const media = operation.requestBody ?? {};
  // An operation that takes JSON and a form alike (job creation) is sent either.
  const bodies: fc.Arbitrary<FuzzRequest['body']>[] = [];
  if (media['application/json']) bodies.push(jsonBody(resolve<Schema>(media['application/json'].schema)));
  if (media['multipart/form-data']) {
    bodies.push(
      formBody(
        resolve<Schema>(media['multipart/form-data'].schema),
        Object.values(media['multipart/form-data'].examples ?? {}).map((example) => example.value),
        fixtures.images,
      ),
    );
  }
  const body: fc.Arbitrary<FuzzRequest['body']> = bodies.length > 0 ? fc.oneof(...bodies) : fc.constant(undefined);

  return fc
    .record({
      segments: fc.tuple(...segments),
      query: fc.tuple(...query, extraQuery),
      headers: fc.tuple(authorization(fixtures.keys), ...headers),
      body,
    })
    .map(({ segments: values, query: pairs, headers: headerSets, body: requestBody }) => {
      let index = 0;
      const path = operation.template.replace(/\{[^}]+\}/g, () => values[index++]);
      const search = new URLSearchParams(pairs.flat()).toString();
      return {
        path: search ? `${path}?${search}` : path,
        headers: Object.assign({}, ...headerSets),
        ...(requestBody ? { body: requestBody } : {}),
      };
    });
}

async function send(baseUrl: string, method: string, request: FuzzRequest): Promise<Response> {
  const headers = { ...request.headers };
  let body: string | FormData | undefined;
  if (request.body?.kind === 'text') {
    headers['Content-Type'] = request.body.contentType;
    body = request.body.text;
  } else if (request.body?.kind === 'form') {
    const form = new FormData();
    for (const part of request.body.parts) {
      if ('text' in part) form.append(part.name, part.text);
      else form.append(part.name, new Blob([part.bytes], { type: part.type }), part.filename);
    }
    body = form;
  }
  return fetch(`${baseUrl}${request.path}`, { method, headers, body });
}

// ---------------------------------------------------------------------------------------------------------------

describe('requests generated from the contract', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let fixtures: Fixtures;
  const operations = contractOperations();
  // Deleting comes last, so the items the other operations are given stay there until then.
  const ordered = [
    ...operations.filter((o) => o.method !== 'DELETE'),
    ...operations.filter((o) => o.method === 'DELETE'),
  ];

  beforeAll(async () => {
    env = await createTestEnvironment();
    // Failed keys are not what is fuzzed here: their limit is lifted so it does not mask the answers behind them.
    // Complete items make feedback 200 and media 200 reachable.
    sut = await startService({ ...env.serviceEnv, ROLE: 'api', AUTH_FAILURES_PER_MINUTE: '1000000' });
    const keys = [await createUserWithKey(env.databaseUrl), await createUserWithKey(env.databaseUrl)];
    const itemIds = await completeItems(sut.baseUrl, env.serviceEnv, keys[0], ['fashion_card', 'default']);
    const images = await Promise.all([
      makeImage(320, 400, 'png'),
      makeImage(256, 256, 'jpeg'),
      makeImage(400, 300, 'webp'),
      makeImage(32, 32, 'png'), // too small
    ]);
    fixtures = { keys, images, itemIds: [...itemIds, randomUUID()] };
  }, 90_000);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  it('covers every operation of the contract', () => {
    expect(operations.map((o) => o.id).sort()).toEqual(
      [
        'cancelHistoryItem',
        'createGenerationJob',
        'deleteFile',
        'deleteHistoryItem',
        'getFile',
        'getHistoryItem',
        'getLiveness',
        'getMedia',
        'getOpenApiJson',
        'getOpenApiYaml',
        'getReadiness',
        'getUsage',
        'getWebhookSecret',
        'listGenerationTypes',
        'listHistoryItems',
        'listTools',
        'rotateWebhookSecret',
        'setHistoryItemFeedback',
        'streamHistoryItemEvents',
        'streamUserEvents',
        'uploadFile',
      ].sort(),
    );
  });

  it.each(ordered.map((operation) => [`${operation.method} ${operation.template}`, operation] as const))(
    '%s: no 5xx, every answer documented',
    async (_name, operation) => {
      const statuses = new Map<number, number>();
      await fc.assert(
        fc.asyncProperty(requests(operation, fixtures), async (request) => {
          const response = await send(sut.baseUrl, operation.method, request);
          statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
          expect(response.status).toBeLessThan(500);
          await expectMatchesContract(response, operation.method, operation.template);
        }),
        { seed: SEED, numRuns: RUNS_PER_OPERATION },
      );

      const counts = [...statuses].sort(([a], [b]) => a - b).map(([status, count]) => `${status}: ${count}`);
      process.stdout.write(
        `${operation.method} ${operation.template} (${RUNS_PER_OPERATION} runs): ${counts.join(', ')}\n`,
      );
      expect((await fetch(`${sut.baseUrl}/health/live`)).status).toBe(200);
    },
    60_000,
  );
});
