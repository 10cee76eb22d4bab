import sharp from 'sharp';
import contractSchema from '../../support/contract-schema.cjs';
import { type RunningMock, startMock } from '../../support/mock.js';
const STARTUP_TIMEOUT_MS = 60_000;

type Contract = {
  paths: Record<
    string,
    Record<string, { responses: Record<string, { content?: Record<string, { example?: unknown }> }> }>
  >;
};

/** The example the contract documents for an operation's 200 JSON answer. */
function documentedExample(path: string): unknown {
  const contract = contractSchema.loadContract() as Contract;
  return contract.paths[path].get.responses['200'].content!['application/json'].example;
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

  /** A job creation as a frontend sends it: multipart, a tool and its images (the mock does not read them). */
  function createJob(
    fields: Record<string, string> = { tool: 'fashion_swap' },
    headers: Record<string, string> = {},
    path = '/generation/generate_image_v2/',
  ) {
    const form = new FormData();
    for (const [name, value] of Object.entries(fields)) form.append(name, value);
    if (fields.tool === 'fashion_swap') {
      form.append('clothes', new Blob([Buffer.from('jpeg bytes')], { type: 'image/jpeg' }), 'clothes.jpg');
      form.append('person', new Blob([Buffer.from('jpeg bytes')], { type: 'image/jpeg' }), 'person.jpg');
    }
    return fetch(`${baseUrl}${path}`, {
      method: 'POST',
      headers: { authorization: 'Bearer anything', ...headers },
      body: form,
    });
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

  it('answers GET /generation/generationTypes with a documented example', async () => {
    const response = await sut('/generation/generationTypes?tool=fashion_swap_half');

    expect(response.status).toBe(200);
    const body = (await response.json()) as Array<{ generation_type: string; is_default: boolean }>;
    expect(body.filter((type) => type.is_default)).toHaveLength(1);
    expect(body.map((type) => type.generation_type)).toEqual(['upper', 'lower']);
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
      const response = await createJob({ tool: 'fashion_swap' }, { prefer: 'wait=5' });

      expect(response.status).toBe(200);
      expect(response.headers.get('preference-applied')).toBe('wait=5');
      expect(await response.json()).toMatchObject({ status: 'complete' });
    });

    it('serves job creation without the trailing slash too, as the contract promises', async () => {
      const response = await createJob({ tool: 'fashion_swap' }, {}, '/generation/generate_image_v2');

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
        const response = await createJob({ tool: 'fashion_swap' }, { prefer });

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
    const response = await createJob({ tool: 'default', webhook_url: 'not a url' });

    expect(response.status).toBe(422);
    expect(await response.json()).toMatchObject({
      code: 'invalid_webhook_url',
      errors: [expect.objectContaining({ field: 'webhook_url' })],
    });
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
  ])('answers a media path (%s) with a real example image', async (file, contentType, format) => {
    // The complete item of the contract's examples.
    const response = await sut(`/media/3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44/${file}`, {});

    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe(contentType);
    const image = await sharp(Buffer.from(await response.arrayBuffer())).metadata();
    expect(image.format).toBe(format);
    expect(Math.max(image.width, image.height)).toBeGreaterThanOrEqual(file === 'stock.jpg' ? 600 : 400);
  });

  it('serves the playground page and its script', async () => {
    const page = await sut('/playground/', {});
    const script = await sut('/playground/app.js', {});

    expect([page.status, script.status]).toEqual([200, 200]);
    expect(await page.text()).toContain('<script type="module" src="app.js"></script>');
    expect(script.headers.get('content-type')).toMatch(/^text\/javascript/);
  });

  it('answers with its own 422 problem when the operation documents no validation error', async () => {
    const response = await sut('/media/not-a-uuid/preview.webp', {});

    expect(response.status).toBe(422);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  });
});
