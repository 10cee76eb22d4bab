import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { request as httpGet } from 'node:http';
import { join } from 'node:path';
import sharp from 'sharp';
import { MediaUrls } from '../../../src/media/media-urls.js';
import { Client, type HistoryItemBody, type ProblemBody } from '../../support/client.js';
import { expectMatchesContract } from '../../support/contract.js';
import { runToExit, imageCommand } from '../../support/deployment.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { inputsFor } from '../../support/jobs.js';
import { mediaFolder, pathExists, query, waitUntil } from '../../support/harness.js';
import { type ResultFile, signedMediaPath, unsigned } from '../../support/media.js';
import { createUserWithKey, freePort, type RunningService, startService } from '../../support/service.js';

const PHOTO = new URL('../../fixtures/photos/coffee.png', import.meta.url).pathname;
const PREVIOUS_KEY = 'the-key-of-before-the-rotation-0123456789';

/** A job on the local engine whose result is a photo of some size, so its download takes more than one read. */
async function photoJob(client: Client): Promise<string> {
  const photo = await sharp(await readFile(PHOTO))
    .resize({ width: 2400 })
    .png()
    .toBuffer();
  return client.createJob({
    tool: 'default',
    image: { data: photo, filename: 'coffee.png', contentType: 'image/png' },
  });
}

/** The item's result at `path` (relative, as the API gives it), with `headers`. */
function download(sut: RunningService, path: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${sut.baseUrl}/${path}`, { headers });
}

async function expectProblem(response: Response, status: number, code: string): Promise<void> {
  expect(response.status).toBe(status);
  const body = (await expectMatchesContract(response, 'GET', '/media/{id}/{file}')) as ProblemBody;
  expect(body.code).toBe(code);
}

describe('signed media URLs', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let owner: Client;
  let ownerKey: string;
  let otherKey: string;
  let item: HistoryItemBody;

  beforeAll(async () => {
    env = await createTestEnvironment();
    // The previous key of a rotation still verifies: URLs handed out before the new key was rolled out keep working.
    sut = await startService({ ...env.serviceEnv, MEDIA_SIGNING_KEY_PREVIOUS: PREVIOUS_KEY });
    ownerKey = await createUserWithKey(env.databaseUrl);
    otherKey = await createUserWithKey(env.databaseUrl);
    owner = new Client(sut.baseUrl, ownerKey);
    item = await owner.waitForFinal(await photoJob(owner), 60_000);
    if (item.status !== 'complete') throw new Error(`the job ended ${JSON.stringify(item)}`);
  }, 90_000);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  it('serves the result to whoever holds its URL, cached privately until the URL expires and no longer', async () => {
    const response = await download(sut, item.stock_url!);

    expect(response.status).toBe(200);
    await expectMatchesContract(response, 'GET', '/media/{id}/{file}');
    const cacheControl = response.headers.get('cache-control')!;
    expect(cacheControl).toMatch(/^private, max-age=\d+$/);
    const maxAge = Number(/max-age=(\d+)/.exec(cacheControl)![1]);
    const expires = Number(new URL(item.stock_url!, 'http://localhost/').searchParams.get('expires'));
    expect(maxAge).toBeGreaterThan(0);
    expect(maxAge).toBeLessThanOrEqual(3600);
    expect(Date.now() + maxAge * 1000).toBeLessThanOrEqual(expires * 1000 + 1000);
    const bytes = Buffer.from(await response.arrayBuffer());
    expect(Number(response.headers.get('content-length'))).toBe(bytes.length);
    expect((await sharp(bytes).metadata()).format).toBe('jpeg');
  });

  it('refuses an unsigned, an altered or a moved URL: 403 media_url_invalid', async () => {
    const signed = new URL(item.preview_url!, 'http://localhost/');
    const signature = signed.searchParams.get('signature')!;
    const flipped = (signature[0] === 'A' ? 'B' : 'A') + signature.slice(1);
    const later = String(Number(signed.searchParams.get('expires')) + 86_400);

    for (const path of [
      unsigned(item.preview_url!),
      `${unsigned(item.preview_url!)}?expires=${signed.searchParams.get('expires')}&signature=${flipped}`,
      `${unsigned(item.preview_url!)}?expires=${later}&signature=${signature}`,
      `${unsigned(item.stock_url!)}${signed.search}`,
    ]) {
      await expectProblem(await download(sut, path), 403, 'media_url_invalid');
    }
  });

  it('refuses a URL past its expiry: 403 media_url_expired', async () => {
    const urls = new MediaUrls(env.serviceEnv.MEDIA_SIGNING_KEY, undefined, 3_600_000, '');
    const expired = urls.sign(unsigned(item.stock_url!), Math.floor(Date.now() / 1000) - 1);

    await expectProblem(await download(sut, expired), 403, 'media_url_expired');
  });

  it("takes URLs signed with MEDIA_SIGNING_KEY_PREVIOUS, and no other key's", async () => {
    const signedBy = (key: string) => {
      const urls = new MediaUrls(key, undefined, 3_600_000, '');
      return urls.sign(unsigned(item.stock_url!), urls.expiresFrom(Date.now()));
    };

    const previous = await download(sut, signedBy(PREVIOUS_KEY));
    expect(previous.status).toBe(200);
    await previous.arrayBuffer();
    await expectProblem(
      await download(sut, signedBy('some-other-deployments-key-0123456789')),
      403,
      'media_url_invalid',
    );
  });

  it("serves the owner's key without a signature; another user's key gets 404, a wrong key 401", async () => {
    const path = unsigned(item.stock_url!);

    const byOwner = await download(sut, path, { Authorization: `Bearer ${ownerKey}` });
    expect(byOwner.status).toBe(200);
    expect(byOwner.headers.get('cache-control')).toBe('private, max-age=0');
    expect((await sharp(Buffer.from(await byOwner.arrayBuffer())).metadata()).format).toBe('jpeg');
    // A key decides when one is sent, even beside a valid signature.
    await expectProblem(
      await download(sut, item.stock_url!, { Authorization: `Bearer ${otherKey}` }),
      404,
      'not_found',
    );
    await expectProblem(await download(sut, path, { Authorization: `Bearer ${otherKey}` }), 404, 'not_found');
    const wrong = await download(sut, path, { Authorization: 'Bearer igs_not-a-key-of-anyone' });
    expect(wrong.status).toBe(401);
    await wrong.arrayBuffer();
  });

  it('answers 404 for an unfinished item, whatever the signature', async () => {
    const id = await pendingItem();

    for (const file of ['preview.webp', 'stock.jpg'] as const) {
      await expectProblem(await download(sut, signedMediaPath(env.serviceEnv, id, file)), 404, 'not_found');
    }
  });

  it('serves a result only while its item exists, whatever files remain', async () => {
    const other = await owner.waitForFinal(await photoJob(owner), 60_000);
    expect(other.status).toBe('complete');
    const id = other.history_item_id;

    // The row goes and the files stay, as a crash between the two steps of a removal would leave them.
    await query(env, 'DELETE FROM history_items WHERE id = $1', [id]);

    expect(await pathExists(mediaFolder(env, id))).toBe(true);
    for (const path of [other.preview_url!, other.stock_url!]) {
      await expectProblem(await download(sut, path), 404, 'not_found');
      await expectProblem(
        await download(sut, unsigned(path), { Authorization: `Bearer ${ownerKey}` }),
        404,
        'not_found',
      );
    }
  }, 90_000);

  it('signs afresh on every read of the item: a list read later gives a later expiry', async () => {
    const first = await owner.get(item.history_item_id);
    // A second later, so the next read's `expires` must differ if it is signed at the read.
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const { body: page } = await owner.list();

    const listed = page.items.find((listedItem) => listedItem.history_item_id === item.history_item_id)!;
    expect(Date.parse(listed.media_urls_expire_at!)).toBeGreaterThan(Date.parse(first.body.media_urls_expire_at!));
    expect(unsigned(listed.stock_url!)).toBe(unsigned(first.body.stock_url!));
    const response = await download(sut, listed.stock_url!);
    expect(response.status).toBe(200);
    await response.arrayBuffer();
  });

  /** An item of the owner's that stays pending: written as a job's row is, with no job queued for it. */
  async function pendingItem(): Promise<string> {
    const id = randomUUID();
    const [{ user_id: userId }] = await query<{ user_id: string }>(
      env,
      'SELECT user_id FROM history_items WHERE id = $1',
      [item.history_item_id],
    );
    await query(
      env,
      `INSERT INTO history_items (id, user_id, tool, generation_type, status, inputs)
       VALUES ($1, $2, 'default', 'enhance', 'pending', '{}')`,
      [id, userId],
    );
    return id;
  }
});

/**
 * Issue 44: a result is opened before anything is answered, so a download racing a delete or a cancel answers the
 * whole image with 200, or 404; and a client that leaves mid-download is no error in the log.
 */
describe('downloads racing deletes and cancels, on local storage', () => {
  const ROUNDS = 6;
  const DOWNLOADS_PER_ITEM = 8;
  let env: TestEnvironment;
  let sut: RunningService;
  let client: Client;
  let apiKey: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    // LOG_LEVEL=info: the request log's lines are what this checks.
    sut = await startService({ ...env.serviceEnv, LOG_LEVEL: 'info' });
    apiKey = await createUserWithKey(env.databaseUrl);
    client = new Client(sut.baseUrl, apiKey);
  }, 60_000);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  /** Status, declared length and the bytes of one download; a body cut short rejects. */
  async function fetchWhole(path: string): Promise<{ status: number; declared: number; bytes: Buffer }> {
    const response = await download(sut, path);
    const bytes = Buffer.from(await response.arrayBuffer());
    return { status: response.status, declared: Number(response.headers.get('content-length')), bytes };
  }

  /** Starts a download and goes away after its first bytes. */
  function leaveMidway(path: string): Promise<void> {
    return new Promise((resolve) => {
      const sent = httpGet(`${sut.baseUrl}/${path}`, (response) => {
        response.once('data', () => {
          sent.destroy();
          resolve();
        });
        response.once('end', resolve);
      });
      sent.on('error', () => resolve());
      sent.end();
    });
  }

  /** Every answer to `path`: whole with 200, or 404. */
  async function expectWholeOr404(path: string): Promise<number> {
    const { status, declared, bytes } = await fetchWhole(path);
    if (status === 200) {
      expect(bytes.length).toBe(declared);
      // Decodes to its last pixel: not an image cut short.
      await sharp(bytes).raw().toBuffer();
    } else {
      expect(status).toBe(404);
    }
    return status;
  }

  it('logs a client that leaves before its answer is whole as a warning, not an error', async () => {
    // An upload cut off halfway: the service is still reading it, so its answer cannot have gone out whole (a
    // download may fit whole into the socket's buffers before its client leaves).
    const upload = httpGet(`${sut.baseUrl}/generation/generate_image_v2/`, {
      method: 'POST',
      headers: {
        Authorization: `Bearer ${apiKey}`,
        'Content-Type': 'multipart/form-data; boundary=cut-off',
        'Content-Length': '1000000',
        // The service's 100 Continue says it is handling the request: only then is the body cut off.
        Expect: '100-continue',
      },
    });
    upload.on('error', () => undefined);
    await once(upload, 'continue');
    upload.write('--cut-off\r\nContent-Disposition: form-data; name="tool"\r\n\r\ndefault\r\n', () => upload.destroy());

    await waitUntil(() => sut.output().includes('request aborted by the client'), 'the request log line');
    const line = sut
      .output()
      .split('\n')
      .find((text) => text.includes('request aborted by the client'))!;
    expect(JSON.parse(line)).toMatchObject({
      level: 40,
      req: { method: 'POST', url: '/generation/generate_image_v2/' },
    });
  }, 90_000);

  it('answers every download whole with 200, or 404; a client that left is no error', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const done = await client.waitForFinal(await photoJob(client), 60_000);
      expect(done.status).toBe('complete');
      const paths = [done.stock_url!, done.preview_url!];
      // A job canceled while its result paths are fetched (or completed first, when the worker wins).
      const racedId = await photoJob(client);
      const racedPaths = (['stock.jpg', 'preview.webp'] as ResultFile[]).map((file) =>
        signedMediaPath(env.serviceEnv, racedId, file),
      );

      const [deleted, canceled] = await Promise.all([
        client.delete(done.history_item_id),
        client.cancel(racedId),
        ...Array.from({ length: DOWNLOADS_PER_ITEM }, (_, index) => expectWholeOr404(paths[index % 2])),
        ...racedPaths.map((path) => expectWholeOr404(path)),
        ...paths.map((path) => leaveMidway(path)),
      ]);

      expect(deleted.status).toBe(204);
      for (const path of paths) expect((await fetchWhole(path)).status).toBe(404);
      expect([200, 409]).toContain(canceled.status);
      const raced = await client.waitForFinal(racedId, 60_000);
      const expected = raced.status === 'complete' ? 200 : 404;
      for (const path of racedPaths) expect(await expectWholeOr404(path)).toBe(expected);
    }

    const errors = sut
      .output()
      .split('\n')
      .filter((line) => /"level":(50|60)/.test(line));
    expect(errors).toEqual([]);
  }, 300_000);
});

describe('the embedded default, with no DATABASE_URL and no MEDIA_SIGNING_KEY', () => {
  it('makes a signing key under its data folder and keeps it: a URL signed before a restart works after it', async () => {
    const env = await createTestEnvironment();
    const settings: Record<string, string> = {
      ...env.serviceEnv,
      LOG_LEVEL: 'info',
      EMBEDDED_DB_DIR: join(env.dataDir, 'data', 'pglite'),
      EMBEDDED_DB_PORT: String(await freePort()),
    };
    delete settings.DATABASE_URL;
    delete settings.MEDIA_SIGNING_KEY;
    let sut: RunningService | undefined;
    try {
      sut = await startService(settings, 60_000);
      await waitUntil(() => /export IGS_API_KEY=igs_\w+/.test(sut!.output()), 'the demo key', 30_000);
      const demoKey = /export IGS_API_KEY=(igs_\w+)/.exec(sut.output())![1];
      const client = new Client(sut.baseUrl, demoKey);
      const item = await client.waitForFinal(await client.createJob(await inputsFor('default')), 45_000);
      expect(item.status).toBe('complete');
      await sut.stop();

      sut = await startService(settings, 60_000);
      const response = await download(sut, item.stock_url!);

      expect(response.status).toBe(200);
      await response.arrayBuffer();
      expect((await readFile(join(env.dataDir, 'data', 'media-signing-key'), 'utf8')).length).toBeGreaterThanOrEqual(
        32,
      );
    } finally {
      await sut?.stop();
      await env.dispose();
    }
  }, 180_000);
});

describe('a start on PostgreSQL without MEDIA_SIGNING_KEY', () => {
  it('stops with a message naming it', async () => {
    const env = await createTestEnvironment();
    try {
      const withoutKey: Record<string, string> = { ...env.serviceEnv };
      delete withoutKey.MEDIA_SIGNING_KEY;
      const run = await runToExit(imageCommand(), { ...withoutKey, PORT: String(await freePort()) }, 30_000);

      expect(run.code).not.toBe(0);
      expect(run.output).toMatch(/MEDIA_SIGNING_KEY must be set when DATABASE_URL is/);
    } finally {
      await env.dispose();
    }
  }, 60_000);
});
