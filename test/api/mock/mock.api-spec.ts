import { readFile } from 'node:fs/promises';
import sharp from 'sharp';
import contractSchema from '../../support/contract-schema.cjs';
import { Client, CREATE_PATH, type FormValue, postJob } from '../../support/client.js';
import { type RunningMock, startMock } from '../../support/mock.js';
const STARTUP_TIMEOUT_MS = 60_000;

type Contract = {
  paths: Record<
    string,
    Record<string, { responses: Record<string, { content?: Record<string, { example?: unknown }> }> }>
  >;
};

type JobCreationContract = {
  paths: Record<
    string,
    {
      post: {
        requestBody: {
          content: Record<
            string,
            {
              schema: { properties: Record<string, { format?: string }> };
              examples: Record<string, { value: Record<string, string> }>;
            }
          >;
        };
      };
    }
  >;
};

/** The example the contract documents for an operation's 200 JSON answer. */
function documentedExample(path: string): unknown {
  const contract = contractSchema.loadContract() as Contract;
  return contract.paths[path].get.responses['200'].content!['application/json'].example;
}

type JobForm = Record<string, FormValue> | [string, FormValue][];

/** An image as a form attaches it: the mock never looks inside. */
const PICTURE: FormValue = { data: Buffer.from('jpeg bytes'), filename: 'photo.jpg', contentType: 'image/jpeg' };
/** The virtual try-on with both of its images: a form the service accepts. */
const TRY_ON = { tool: 'fashion_swap', clothes: PICTURE, person: PICTURE };

/** The contract's example job form of each tool, its images as files: forms the service accepts. */
function documentedForms(): Record<string, Record<string, FormValue>> {
  const contract = contractSchema.loadContract() as unknown as JobCreationContract;
  const { schema, examples } = contract.paths[CREATE_PATH].post.requestBody.content['multipart/form-data'];
  return Object.fromEntries(
    Object.values(examples).map(({ value }) => [
      value.tool,
      Object.fromEntries(
        Object.entries(value).map(([name, text]) => [
          name,
          schema.properties[name].format === 'binary' ? PICTURE : text,
        ]),
      ),
    ]),
  );
}

/** Prism's list of what the request broke, from its `sl-violations` header. */
function violations(response: Response): Array<{ location: string[]; code: string | number; message: string }> {
  return JSON.parse(response.headers.get('sl-violations') ?? '[]');
}

/**
 * `npm run mock` (scripts/mock.mjs): Prism's mock of the contract, with real images on the media paths and the
 * playground; what frontend developers run before the service exists.
 */
describe('the mock server (npm run mock)', () => {
  let mock: RunningMock;
  let baseUrl: string;

  beforeAll(async () => {
    mock = await startMock();
    baseUrl = mock.baseUrl;
  }, STARTUP_TIMEOUT_MS);

  afterAll(() => mock?.stop());

  function sut(path: string, headers: Record<string, string> = { authorization: 'Bearer anything' }) {
    return fetch(`${baseUrl}${path}`, { headers });
  }

  /** A job creation as a frontend sends it: multipart, a tool and its images (the mock reads only their names). */
  function createJob(fields: JobForm = TRY_ON, headers: Record<string, string> = {}, path = CREATE_PATH) {
    return postJob(baseUrl, 'anything', fields, headers, path);
  }

  function sendFeedback(body: string) {
    return fetch(`${baseUrl}/user/generation-history/feedback/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44`, {
      method: 'PATCH',
      headers: { authorization: 'Bearer anything', 'content-type': 'application/json' },
      body,
    });
  }

  it('answers GET /generation/tools with the documented example: the seven tools', async () => {
    const response = await sut('/generation/tools');

    expect(response.status).toBe(200);
    const body = (await response.json()) as Array<{ tool: string }>;
    expect(body).toEqual(documentedExample('/generation/tools'));
    expect(body.map((tool) => tool.tool)).toEqual([
      'fashion_swap',
      'fashion_swap_half',
      'fashion_card',
      'lengerie',
      'furniture',
      'fabric',
      'default',
    ]);
  });

  it.each([
    ['fashion_swap_half', ['upper', 'lower']],
    ['fashion_swap', ['fashion_swap_full']],
    ['default', ['enhance']],
  ])('answers GET /generation/generationTypes with the types of the tool asked for: %s', async (tool, types) => {
    const response = await sut(`/generation/generationTypes?tool=${tool}`);

    expect(response.status).toBe(200);
    const body = (await response.json()) as Array<{ generation_type: string; tool: string; is_default: boolean }>;
    expect(body.map((type) => type.generation_type)).toEqual(types);
    expect(body.filter((type) => type.is_default)).toHaveLength(1);
    expect(body.every((type) => type.tool === tool)).toBe(true);
  });

  it('answers GET /generation/generationTypes for an unknown tool 404 not_found', async () => {
    const response = await sut('/generation/generationTypes?tool=hat_swap');

    expect(response.status).toBe(404);
    expect(await response.json()).toMatchObject({ status: 404, code: 'not_found' });
  });

  it('answers 401 problem+json without an Authorization header', async () => {
    const response = await sut('/generation/tools', {});

    expect(response.status).toBe(401);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(response.headers.get('www-authenticate')).toMatch(/^Bearer/);
    expect(await response.json()).toMatchObject({ status: 401, code: 'unauthorized' });
  });

  it('answers the health probes without a key', async () => {
    const response = await sut('/health/live', {});

    expect(response.status).toBe(200);
    expect(await response.json()).toMatchObject({ status: 'ok' });
  });

  // Prism names what a request breaks in `sl-violations`; the mock answers it as the service does, 400 (Prism's
  // own 422 problem stays where the operation documents neither 400 nor 422).
  it('rejects a history page size the contract does not allow, naming the parameter', async () => {
    const response = await sut('/user/generation-history?limit=1000');

    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(await response.json()).toMatchObject({ status: 400, code: 'validation_failed' });
    expect(violations(response)).toEqual([
      expect.objectContaining({ location: ['request', 'query', 'limit'], code: 'maximum' }),
    ]);
  });

  it('rejects a generation types request without the tool parameter', async () => {
    const response = await sut('/generation/generationTypes');

    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(violations(response)).toEqual([expect.objectContaining({ code: 'required' })]);
    expect(violations(response)[0].message).toContain('tool');
  });

  it('rejects a history item id that is not a UUID', async () => {
    const response = await sut('/user/generation-history/not-a-uuid');

    expect(response.status).toBe(400);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(violations(response).length).toBeGreaterThan(0);
  });

  describe('answers job creation and polling as the service does', () => {
    it('accepts a job without Prefer: wait as 202 pending, with no Preference-Applied', async () => {
      const response = await createJob();

      expect(response.status).toBe(202);
      expect(response.headers.get('preference-applied')).toBeNull();
      expect(response.headers.get('location')).toMatch(/^\/user\/generation-history\/[0-9a-f-]{36}$/);
      expect(await response.json()).toMatchObject({ status: 'pending' });
    });

    it('answers a job with Prefer: wait=N as 200 with its final status and Preference-Applied: wait=N', async () => {
      const response = await createJob(TRY_ON, { prefer: 'wait=5' });

      expect(response.status).toBe(200);
      expect(response.headers.get('preference-applied')).toBe('wait=5');
      expect(await response.json()).toMatchObject({ status: 'complete' });
    });

    it('serves job creation without the trailing slash too, as the contract promises', async () => {
      const response = await createJob(TRY_ON, {}, '/generation/generate_image_v2');

      expect(response.status).toBe(202);
      expect(await response.json()).toMatchObject({ status: 'pending' });
    });

    it('answers an item without Preference-Applied unless Prefer: wait was sent', async () => {
      const plain = await sut('/user/generation-history/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44');
      const waited = await sut('/user/generation-history/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44', {
        authorization: 'Bearer anything',
        prefer: 'wait=7',
      });

      expect([plain.status, waited.status]).toEqual([200, 200]);
      expect(plain.headers.get('preference-applied')).toBeNull();
      expect(waited.headers.get('preference-applied')).toBe('wait=7');
    });

    it.each(['wait=0', 'wait=61', 'wait=soon'])(
      'refuses Prefer: %s as 400 naming the Prefer header',
      async (prefer) => {
        const response = await createJob(TRY_ON, { prefer });

        expect(response.status).toBe(400);
        expect(await response.json()).toMatchObject({
          code: 'validation_failed',
          errors: [expect.objectContaining({ field: 'Prefer' })],
        });
      },
    );

    it('refuses a tool the tools list does not have as 422 unknown_tool', async () => {
      const response = await createJob({ tool: 'hat_swap' });

      expect(response.status).toBe(422);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      const body = (await response.json()) as { code: string; detail: string };
      expect(body.code).toBe('unknown_tool');
      expect(body.detail).toContain('hat_swap');
    });
  });

  // The service matches a job form's fields to its tool before it looks at a single image; the mock runs the same
  // check, so a frontend meets these refusals before it meets the service.
  describe('refuses a form whose fields do not fit its tool, as the service does', () => {
    it.each<{ name: string; fields: JobForm; status: number; code: string; field?: string }>([
      {
        name: 'fashion_swap without its person image',
        fields: { tool: 'fashion_swap', clothes: PICTURE },
        status: 400,
        code: 'validation_failed',
        field: 'person',
      },
      {
        name: 'fashion_card with a person image, which it does not take',
        fields: { tool: 'fashion_card', clothes: PICTURE, person: PICTURE },
        status: 400,
        code: 'unexpected_field',
        field: 'person',
      },
      {
        name: 'a field no tool has',
        fields: { tool: 'default', image: PICTURE, colour: 'red' },
        status: 400,
        code: 'unexpected_field',
        field: 'colour',
      },
      {
        name: 'an image sent twice',
        fields: [
          ['tool', 'default'],
          ['image', PICTURE],
          ['image', PICTURE],
        ],
        status: 400,
        code: 'unexpected_field',
        field: 'image',
      },
      {
        name: 'an image sent as text',
        fields: { tool: 'default', image: 'a photo' },
        status: 400,
        code: 'validation_failed',
        field: 'image',
      },
      {
        name: 'the prompt sent as a file',
        fields: { tool: 'default', image: PICTURE, prompt: PICTURE },
        status: 400,
        code: 'validation_failed',
        field: 'prompt',
      },
      {
        name: 'a generation type of another tool',
        fields: { ...TRY_ON, generation_type: 'enhance' },
        status: 422,
        code: 'invalid_generation_type',
      },
    ])('$name: $status $code', async ({ fields, status, code, field }) => {
      const response = await createJob(fields);

      expect(response.status).toBe(status);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      const body = (await response.json()) as { code: string; errors?: Array<{ field: string }> };
      expect(body).toMatchObject({ status, code });
      expect(body.errors?.map((error) => error.field)).toEqual(field ? [field] : undefined);
    });

    it.each(Object.entries(documentedForms()))(
      "accepts the contract's %s form: 202, and 200 under Prefer: wait",
      async (_tool, form) => {
        const queued = await createJob(form);
        const waited = await createJob(form, { prefer: 'wait=5' });

        expect([queued.status, waited.status]).toEqual([202, 200]);
        expect(await queued.json()).toMatchObject({ status: 'pending' });
        expect(await waited.json()).toMatchObject({ status: 'complete' });
      },
    );
  });

  // A form highlights the field a 400 names in `errors[].field`: the mock must name the one the request broke.
  describe('names the offending field in a 400 problem', () => {
    it.each([
      ['a generation types request without tool', () => sut('/generation/generationTypes'), 'tool'],
      ['a history status filter out of its enum', () => sut('/user/generation-history?status=bogus'), 'status'],
      ['a history item id that is not a UUID', () => sut('/user/generation-history/not-a-uuid'), 'id'],
      ['feedback that is not a boolean', () => sendFeedback('{"like":"yes"}'), 'like'],
      ['a job creation without tool', () => createJob({ generation_type: 'upper' }), 'tool'],
    ])('%s', async (_case, send, field) => {
      const response = await send();

      expect(response.status).toBe(400);
      expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
      const body = (await response.json()) as { code: string; detail: string; errors: Array<{ field: string }> };
      expect(body).toMatchObject({ status: 400, code: 'validation_failed' });
      expect(body.errors.map((error) => error.field)).toEqual([field]);
      expect(body.detail).toContain(field);
    });

    it('names every parameter a request breaks', async () => {
      const response = await sut('/user/generation-history?limit=abc&page=0');

      const body = (await response.json()) as { errors: Array<{ field: string; message: string }> };
      expect(body.errors.map((error) => error.field).sort()).toEqual(['limit', 'page']);
      expect(body.errors.every((error) => error.message.length > 0)).toBe(true);
    });
  });

  it('refuses a webhook_url that is not a URL as 422 invalid_webhook_url, as the service does', async () => {
    const response = await createJob({ tool: 'default', image: PICTURE, webhook_url: 'not a url' });

    expect(response.status).toBe(422);
    expect(await response.json()).toMatchObject({
      code: 'invalid_webhook_url',
      errors: [expect.objectContaining({ field: 'webhook_url' })],
    });
  });

  it('takes webhook_events as one part per event, and answers with the creation budget as the service does', async () => {
    const response = await createJob([
      ['tool', 'default'],
      ['image', PICTURE],
      ['webhook_url', 'https://app.example.com/hooks/generation'],
      ['webhook_events', 'started'],
      ['webhook_events', 'progress'],
    ]);

    expect(response.status).toBe(202);
    expect(response.headers.get('ratelimit-policy')).toBe('"creations";q=60;w=60');
    expect(response.headers.get('ratelimit')).toMatch(/^"creations";r=\d+;t=\d+$/);
  });

  it('refuses an unknown webhook event as 422 invalid_webhook_events, as the service does', async () => {
    const response = await createJob([
      ['tool', 'default'],
      ['image', PICTURE],
      ['webhook_url', 'https://app.example.com/hooks/generation'],
      ['webhook_events', 'finished'],
    ]);

    expect(response.status).toBe(422);
    expect(await response.json()).toMatchObject({
      code: 'invalid_webhook_events',
      errors: [expect.objectContaining({ field: 'webhook_events' })],
    });
  });

  it('answers GET /user/usage with the documented example', async () => {
    const response = await sut('/user/usage');

    expect(response.status).toBe(200);
    expect(await response.json()).toEqual(documentedExample('/user/usage'));
  });

  describe('sends an X-Request-Id on every answer, as the service does', () => {
    it.each([
      ['a 200', '/generation/tools', { authorization: 'Bearer anything' }],
      ['a 401', '/generation/tools', {}],
      ['a 400', '/user/generation-history?limit=1000', { authorization: 'Bearer anything' }],
      ['a media image', '/media/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44/stock.jpg', {}],
    ])('on %s', async (_case, path, headers) => {
      const response = await sut(path, headers);

      expect(response.headers.get('x-request-id')).toMatch(/^[A-Za-z0-9._-]{1,128}$/);
    });

    it("keeps the client's own X-Request-Id", async () => {
      const response = await sut('/generation/tools', {
        authorization: 'Bearer anything',
        'x-request-id': 'page-42.a',
      });

      expect(response.headers.get('x-request-id')).toBe('page-42.a');
    });
  });

  it.each([
    ['stock.jpg', 'image/jpeg', 'jpeg'],
    ['preview.webp', 'image/webp', 'webp'],
  ])(
    'answers a signed media URL (%s) with a real example image, as the service does',
    async (file, contentType, format) => {
      // The complete item of the contract's examples, signed afresh by the mock, on the mock's own origin.
      const item = (await (await sut('/user/generation-history/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44')).json()) as {
        preview_url: string;
        stock_url: string;
        output_url: string;
        media_urls_expire_at: string;
      };
      expect(item.output_url).toBe(`${baseUrl}/${item.stock_url}`);
      expect(Date.parse(item.media_urls_expire_at)).toBeGreaterThan(Date.now());
      const path = file === 'stock.jpg' ? item.stock_url : item.preview_url;

      const response = await sut(`/${path}`, {});

      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toBe(contentType);
      expect(response.headers.get('cache-control')).toMatch(/^private, max-age=\d+$/);
      const image = await sharp(Buffer.from(await response.arrayBuffer())).metadata();
      expect(image.format).toBe(format);
      expect(Math.max(image.width, image.height)).toBeGreaterThanOrEqual(file === 'stock.jpg' ? 600 : 400);
    },
  );

  it("serves every result of an item's outputs, signed afresh, each a real picture of its own", async () => {
    const item = (await (await sut('/user/generation-history/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44')).json()) as {
      stock_url: string;
      outputs: { stock_url: string; preview_url: string; output_url: string; seed: number | null }[];
    };
    expect(item.outputs.length).toBeGreaterThan(1);
    expect(item.outputs[0].stock_url).toBe(item.stock_url);

    const stocks = [];
    for (const output of item.outputs) {
      expect(output.output_url).toBe(`${baseUrl}/${output.stock_url}`);
      const response = await sut(`/${output.stock_url}`, {});
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toBe('image/jpeg');
      stocks.push(Buffer.from(await response.arrayBuffer()));
      expect((await sut(`/${output.preview_url}`, {})).headers.get('content-type')).toBe('image/webp');
    }
    expect((await sharp(stocks[0]).metadata()).format).toBe('jpeg');
    expect(stocks[0].equals(stocks[1])).toBe(false);
  });

  it('refuses an unsigned media path and an altered signature with 403, as the service does', async () => {
    const unsigned = await sut('/media/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44/stock.jpg', {});
    const altered = await sut(
      '/media/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44/stock.jpg?expires=1748782890&signature=Xq3Vb0yT8n0cJz4Kx1mWq7rS2dL9fH6aE5pG0uN3kYw',
      {},
    );

    for (const response of [unsigned, altered]) {
      expect(response.status).toBe(403);
      expect(await response.json()).toMatchObject({ code: 'media_url_invalid' });
    }
  });

  it('serves the playground page and its script', async () => {
    const page = await sut('/playground/', {});
    const script = await sut('/playground/app.js', {});

    expect([page.status, script.status]).toEqual([200, 200]);
    expect(await page.text()).toContain('<script type="module" src="app.js"></script>');
    expect(script.headers.get('content-type')).toMatch(/^text\/javascript/);
  });

  it('stores a real photo as the service does: its own format, size and dimensions, then reads and deletes it', async () => {
    const client = new Client(baseUrl, 'anything');
    const photo = await readFile('test/fixtures/photos/chelsea.png');

    const stored = await client.uploadFile(photo, 'image/png');
    const read = await client.getFile(stored.body.file_id);
    const removed = await client.deleteFile(stored.body.file_id);
    const again = await client.getFile(stored.body.file_id);

    expect(stored.status).toBe(201);
    expect(stored.body).toMatchObject({ content_type: 'image/png', width: 451, height: 300, size: photo.length });
    expect(stored.headers.get('location')).toBe(`/files/${stored.body.file_id}`);
    expect(read.body).toEqual(stored.body);
    expect([removed.status, again.status, again.body.code]).toEqual([204, 404, 'not_found']);
    expect((await client.uploadFile(Buffer.from('not a picture'.repeat(20)))).status).toBe(415);
  });

  it('takes a JSON job naming its images by URL and file id, and refuses one as the service does', async () => {
    const client = new Client(baseUrl, 'anything');

    const accepted = await client.createJson({
      tool: 'fashion_swap',
      inputs: { clothes: 'https://images.example.com/shirt.jpg', person: 'file_q7Hk2mVx9LcT4pRw8sNb3e' },
    });
    const base64 = await client.createJson({ tool: 'default', inputs: { image: 'aGVsbG8=' } });
    const otherTool = await client.createJson({
      tool: 'fashion_card',
      inputs: { clothes: 'file_1', person: 'file_2' },
    });

    expect(accepted.status).toBe(202);
    expect([base64.status, base64.body.code, base64.body.errors?.[0].field]).toEqual([
      400,
      'validation_failed',
      'image',
    ]);
    expect([otherTool.status, otherTool.body.code]).toEqual([400, 'unexpected_field']);
  });

  it('answers with its own 422 problem when the operation documents no validation error', async () => {
    const response = await sut('/media/not-a-uuid/preview.webp', {});

    expect(response.status).toBe(422);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  });
});
