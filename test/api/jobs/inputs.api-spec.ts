import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { hostname } from 'node:os';
import { Client, type HistoryItemBody, type ProblemBody } from '../../support/client.js';
import { query, waitUntil } from '../../support/harness.js';
import { ImageServer } from '../../support/image-server.js';
import { serviceForBlock, type ServiceBlock } from '../../support/service-block.js';
import { createUserWithKey, runCli } from '../../support/service.js';
import { filesUnder } from '../../support/uploads.js';

const MIB = 1024 * 1024;
const PERSON = 'test/fixtures/photos/astronaut.jpg';
const CLOTHES = 'docs/examples/fashion_swap_half-upper/input-clothes.jpg';

/** A fresh user of the block's service, with the typed client that speaks for them. */
async function newClient(block: ServiceBlock, name = `inputs-${randomUUID()}`): Promise<Client> {
  return new Client(block.sut.baseUrl, await createUserWithKey(block.env.databaseUrl, name));
}

/** Everything the service keeps of uploads and inputs on disk, to compare before and after a refused request. */
async function kept(block: ServiceBlock): Promise<{ tmp: string[]; inputs: string[]; files: number }> {
  const [{ count }] = await query<{ count: number }>(block.env, 'SELECT count(*)::int AS count FROM files');
  return {
    tmp: await filesUnder(block.env.serviceEnv.UPLOAD_TMP_DIR),
    inputs: (await filesUnder(block.env.serviceEnv.INPUT_ROOT)).sort(),
    files: count,
  };
}

/** The result image of a complete item, as its client downloads it. */
async function stockOf(block: ServiceBlock, item: HistoryItemBody): Promise<Buffer> {
  expect(item.status).toBe('complete');
  const answer = await fetch(`${block.sut.baseUrl}/${item.stock_url!}`);
  expect(answer.status).toBe(200);
  return Buffer.from(await answer.arrayBuffer());
}

describe('JSON job creation with inputs by URL or stored file', () => {
  // Loopback image servers stand for the web: plain http and private addresses are allowed here, as in development.
  const block = serviceForBlock({
    WEBHOOK_ALLOW_HTTP: 'true',
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    URL_FETCH_TIMEOUT: '1s',
    UPLOAD_MAX_FILE_BYTES: String(MIB),
  });
  let images: ImageServer;
  let person: Buffer;
  let clothes: Buffer;

  beforeAll(async () => {
    images = await ImageServer.start();
    [person, clothes] = await Promise.all([readFile(PERSON), readFile(CLOTHES)]);
    images.route('/person.jpg', { kind: 'bytes', data: person, contentType: 'image/jpeg' });
    images.route('/clothes.jpg', { kind: 'bytes', data: clothes, contentType: 'image/jpeg' });
  });

  afterAll(() => images?.stop());

  it('takes two image URLs, fetched before the answer, and makes what the same images uploaded make', async () => {
    const sut = await newClient(block);

    const answer = await sut.createJson({
      tool: 'fashion_swap_half',
      generation_type: 'upper',
      inputs: { clothes: images.url('/clothes.jpg'), person: images.url('/person.jpg') },
    });
    const uploaded = await sut.createJob({
      tool: 'fashion_swap_half',
      generation_type: 'upper',
      clothes: { data: clothes, contentType: 'image/jpeg' },
      person: { data: person, contentType: 'image/jpeg' },
    });

    expect(answer.status).toBe(202);
    expect(answer.headers.get('location')).toBe(`/user/generation-history/${answer.body.history_item_id}`);
    const [byUrl, byUpload] = await Promise.all([
      sut.waitForFinal(answer.body.history_item_id),
      sut.waitForFinal(uploaded),
    ]);
    expect(await stockOf(block, byUrl)).toEqual(await stockOf(block, byUpload));
  }, 60_000);

  it('stores a file, names it in jobs, and keeps each job whole when the file is deleted', async () => {
    const sut = await newClient(block);

    const stored = await sut.uploadFile(person, 'image/jpeg');
    expect(stored.status).toBe(201);
    expect(stored.body).toMatchObject({ content_type: 'image/jpeg', size: person.length });
    expect(stored.body.file_id).toMatch(/^file_[0-9a-f]{32}$/);
    expect(stored.headers.get('location')).toBe(`/files/${stored.body.file_id}`);
    expect(new Date(stored.body.expires_at).getTime() - Date.now()).toBeGreaterThan(23 * 3600_000);
    expect((await sut.getFile(stored.body.file_id)).body).toEqual(stored.body);

    const mixed = await sut.createJson({
      tool: 'fashion_swap_half',
      generation_type: 'upper',
      inputs: { clothes: images.url('/clothes.jpg'), person: stored.body.file_id },
    });
    expect(mixed.status).toBe(202);
    // Gone before the job has run: the job holds its own copy.
    expect((await sut.deleteFile(stored.body.file_id)).status).toBe(204);
    expect((await sut.getFile(stored.body.file_id)).status).toBe(404);
    expect((await sut.deleteFile(stored.body.file_id)).status).toBe(404);

    const item = await sut.waitForFinal(mixed.body.history_item_id);
    const uploaded = await sut.waitForFinal(
      await sut.createJob({
        tool: 'fashion_swap_half',
        generation_type: 'upper',
        clothes: { data: clothes, contentType: 'image/jpeg' },
        person: { data: person, contentType: 'image/jpeg' },
      }),
    );
    expect(await stockOf(block, item)).toEqual(await stockOf(block, uploaded));
  }, 60_000);

  it('takes a text input beside a stored file, and answers an idempotent repeat with the first job', async () => {
    const sut = await newClient(block);
    const { body: file } = await sut.uploadFile(person);
    const job = { tool: 'default', inputs: { image: file.file_id, prompt: 'warmer light' } };

    const first = await sut.createJson(job, { 'Idempotency-Key': 'json-1' });
    const repeat = await sut.createJson(job, { 'Idempotency-Key': 'json-1' });
    const other = await sut.createJson(
      { ...job, inputs: { image: images.url('/person.jpg') } },
      {
        'Idempotency-Key': 'json-1',
      },
    );

    expect([first.status, repeat.status, other.status]).toEqual([202, 202, 422]);
    expect(repeat.body.history_item_id).toBe(first.body.history_item_id);
    expect(other.body.code).toBe('idempotency_key_reused');
    const [row] = await query<{ texts: unknown }>(block.env, 'SELECT texts FROM history_items WHERE id = $1', [
      first.body.history_item_id,
    ]);
    expect(row.texts).toEqual({ prompt: 'warmer light' });
    await sut.waitForFinal(first.body.history_item_id);
  });

  it("answers another user's file as a missing one, on its own and in a job", async () => {
    const owner = await newClient(block);
    const other = await newClient(block);
    const { body: file } = await owner.uploadFile(person);
    const before = await kept(block);

    const read = await other.getFile(file.file_id);
    const removed = await other.deleteFile(file.file_id);
    const job = await other.createJson({ tool: 'default', inputs: { image: file.file_id } });

    expect([read.status, removed.status, job.status]).toEqual([404, 404, 404]);
    expect(job.body.errors).toEqual([expect.objectContaining({ field: 'image' })]);
    expect((await owner.getFile(file.file_id)).status).toBe(200);
    expect(await kept(block)).toEqual(before);
    expect((await other.list()).body.total).toBe(0);
  });

  it('refuses a stored file that is not an image, or too large, and keeps nothing', async () => {
    const sut = await newClient(block);
    const before = await kept(block);

    const text = await sut.uploadFile(Buffer.from('not a picture\n'.repeat(100)), 'image/jpeg');
    const large = await sut.uploadFile(Buffer.concat([person, Buffer.alloc(MIB)]), 'image/jpeg');

    expect([text.status, text.body.code]).toEqual([415, 'unsupported_media_type']);
    expect([large.status, large.body.code]).toEqual([413, 'payload_too_large']);
    expect(await kept(block)).toEqual(before);
  });

  it("removes a user's files with the user (igs users delete), and leaves other users' alone", async () => {
    const name = `doomed-${randomUUID()}`;
    const doomed = await newClient(block, name);
    const survivor = await newClient(block);
    const mine = await Promise.all([
      doomed.uploadFile(await readFile(PERSON)),
      doomed.uploadFile(await readFile(PERSON)),
    ]);
    const theirs = await survivor.uploadFile(await readFile(PERSON));

    const result = await runCli(['users', 'delete', name, '--yes'], {
      ...block.env.serviceEnv,
      AUTH_CACHE_TTL_MS: '100',
    });

    expect(result.code).toBe(0);
    expect(result.stdout).toContain('2 stored files');
    const left = await query<{ id: string }>(block.env, 'SELECT id FROM files WHERE id = ANY($1)', [
      [...mine.map(({ body }) => body.file_id), theirs.body.file_id],
    ]);
    expect(left.map((row) => row.id)).toEqual([theirs.body.file_id]);
    const bytes = await filesUnder(block.env.serviceEnv.INPUT_ROOT);
    for (const { body } of mine) expect(bytes).not.toContain(body.file_id);
    expect(bytes).toContain(theirs.body.file_id);
  }, 30_000);

  describe('refusing each bad input with its 4xx, naming it, keeping nothing', () => {
    beforeAll(() => {
      images.route('/missing.jpg', { kind: 'status', status: 404 });
      images.route('/stall.jpg', { kind: 'stall' });
      for (let hop = 0; hop < 4; hop++) images.route(`/hop${hop}`, { kind: 'redirect', to: `/hop${hop + 1}` });
      images.route('/hop4', { kind: 'bytes', data: person, contentType: 'image/jpeg' });
      images.route('/declared-large.jpg', {
        kind: 'bytes',
        data: Buffer.concat([person, Buffer.alloc(2 * MIB)]),
        contentType: 'image/jpeg',
      });
      images.route('/streamed-large.jpg', { kind: 'endless', data: person, bytes: 3 * MIB });
      images.route('/page.html', {
        kind: 'bytes',
        data: Buffer.from('<!doctype html><title>A shop</title>'.repeat(50)),
        contentType: 'image/jpeg',
      });
    });

    it.each([
      ['a 404 from the image server', () => images.url('/missing.jpg'), 422, 'input_fetch_failed', /HTTP 404/],
      ['no answer within URL_FETCH_TIMEOUT', () => images.url('/stall.jpg'), 422, 'input_fetch_failed', /within 1 s/],
      ['four redirects', () => images.url('/hop0'), 422, 'input_fetch_failed', /more than 3 redirects/],
      [
        'a body declared over the byte limit',
        () => images.url('/declared-large.jpg'),
        413,
        'payload_too_large',
        /bytes/,
      ],
      [
        'a body streamed past the byte limit',
        () => images.url('/streamed-large.jpg'),
        413,
        'payload_too_large',
        /bytes/,
      ],
      ['a web page, not an image', () => images.url('/page.html'), 415, 'unsupported_media_type', /JPEG, PNG or WebP/],
      [
        'a URL with credentials',
        () => images.url('/person.jpg', 'u:p@127.0.0.1'),
        422,
        'input_fetch_failed',
        /credentials/,
      ],
      ['an unknown file id', () => 'file_0123456789abcdef0123456789abcdef', 404, 'not_found', /no such file/],
      ['neither a URL nor a file id', () => 'aGVsbG8=', 400, 'validation_failed', /https URL or the file_id/],
    ])(
      '%s',
      async (_name, value, status, code, message) => {
        const sut = await newClient(block);
        const before = await kept(block);

        // The good input comes first and is fetched too: its copy must go with the refused job.
        const answer = await sut.createJson({
          tool: 'fashion_swap',
          inputs: { clothes: images.url('/clothes.jpg'), person: value() },
        });

        expect(answer.status).toBe(status);
        expect(answer.contentType).toBe('application/problem+json');
        const problem = answer.body as unknown as ProblemBody;
        expect(problem.code).toBe(code);
        expect(problem.errors).toEqual([{ field: 'person', message: expect.stringMatching(message) }]);
        expect(await kept(block)).toEqual(before);
        expect((await sut.list()).body.total).toBe(0);
      },
      30_000,
    );

    it('answers the first input to fail, and drops the fetch of another still going', async () => {
      const sut = await newClient(block);
      const before = await kept(block);

      const answer = await sut.createJson({
        tool: 'fashion_swap',
        inputs: { clothes: images.url('/stall.jpg'), person: images.url('/missing.jpg') },
      });

      expect([answer.status, answer.body.code]).toEqual([422, 'input_fetch_failed']);
      expect(answer.body.errors).toEqual([{ field: 'person', message: 'answered HTTP 404' }]);
      expect(await kept(block)).toEqual(before);
    });

    it('follows three redirects, each to be judged again', async () => {
      const sut = await newClient(block);

      const answer = await sut.createJson({ tool: 'default', inputs: { image: images.url('/hop1') } });

      expect(answer.status).toBe(202);
      await sut.waitForFinal(answer.body.history_item_id);
    });

    it.each([
      ['a field the JSON job does not have', { tool: 'default', inputs: {}, image: 'x' }, 400, 'unexpected_field'],
      ['inputs missing', { tool: 'default' }, 400, 'validation_failed'],
      ['an input of another tool', { tool: 'default', inputs: { person: 'file_1' } }, 400, 'unexpected_field'],
      ['a required image missing', { tool: 'default', inputs: {} }, 400, 'validation_failed'],
      ['an unknown tool', { tool: 'hat_swap', inputs: {} }, 422, 'unknown_tool'],
      [
        'a webhook_url to a file: URL',
        { tool: 'default', inputs: { image: 'file_1' }, webhook_url: 'file:///x' },
        422,
        'invalid_webhook_url',
      ],
      ['a number for the tool', { tool: 7, inputs: {} }, 400, 'validation_failed'],
      ['an array body', [], 400, 'bad_request'],
    ])('refuses %s', async (_name, job, status, code) => {
      const sut = await newClient(block);

      const answer = await sut.createJson(job as Record<string, unknown>);

      expect([answer.status, answer.body.code]).toEqual([status, code]);
    });
  });
});

describe('URL inputs without the development settings', () => {
  // Plain http on, private addresses off: the address rules alone refuse these.
  const block = serviceForBlock({ ROLE: 'api', WEBHOOK_ALLOW_HTTP: 'true', FILE_TTL: '1s' });
  let images: ImageServer;

  beforeAll(async () => {
    images = await ImageServer.start();
    images.route('/person.jpg', { kind: 'bytes', data: await readFile(PERSON), contentType: 'image/jpeg' });
  });

  afterAll(() => images?.stop());

  it.each([
    ['a loopback address in the URL', () => images.url('/person.jpg')],
    // This machine's name resolves to a loopback address: refused on the address connected to, not the name.
    ['a name that resolves to a loopback address', () => images.url('/person.jpg', hostname())],
  ])('refuses %s before a request reaches it, naming the input', async (_name, url) => {
    const sut = await newClient(block);
    const before = await kept(block);

    const answer = await sut.createJson({ tool: 'default', inputs: { image: url() } });

    expect(answer.status).toBe(422);
    expect(answer.body.code).toBe('input_fetch_failed');
    expect(answer.body.errors).toEqual([
      { field: 'image', message: expect.stringMatching(/private|loopback|refused/) },
    ]);
    expect(images.requests.get('/person.jpg')).toBeUndefined();
    expect(await kept(block)).toEqual(before);
  });

  it('sweeps stored bytes no file names once they are old enough, and leaves young ones', async () => {
    const inputs = block.env.serviceEnv.INPUT_ROOT;
    const [stray, young] = ['file_' + 'a'.repeat(32), 'file_' + 'b'.repeat(32)];
    // Made by the store's first write; none has happened yet when this test runs alone.
    await mkdir(inputs, { recursive: true });
    for (const name of [stray, young]) await writeFile(join(inputs, name), 'bytes of a store whose row failed');
    // Written twenty minutes ago: past any POST /files still writing its row.
    const then = new Date(Date.now() - 20 * 60_000);
    await utimes(join(inputs, stray), then, then);

    await waitUntil(async () => !(await filesUnder(inputs)).includes(stray), 'the sweep to remove the stray bytes');

    expect(await filesUnder(inputs)).toContain(young);
    await rm(join(inputs, young));
  });

  it('forgets a file past FILE_TTL: 404 at once, in jobs too, and its row and bytes swept', async () => {
    const sut = await newClient(block);
    const { body: file } = await sut.uploadFile(await readFile(PERSON));
    expect(Date.parse(file.expires_at) - Date.now()).toBeLessThanOrEqual(1000);

    await waitUntil(async () => (await sut.getFile(file.file_id)).status === 404, 'the file to expire');
    const job = await sut.createJson({ tool: 'default', inputs: { image: file.file_id } });

    expect([job.status, job.body.code]).toEqual([404, 'not_found']);
    // The row goes first, then the bytes it named.
    await waitUntil(
      async () => (await filesUnder(block.env.serviceEnv.INPUT_ROOT)).every((key) => key !== file.file_id),
      'the sweep to remove the bytes',
    );
    expect((await kept(block)).files).toBe(0);
  });
});
