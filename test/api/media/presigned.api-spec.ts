import sharp from 'sharp';
import { Client, type HistoryItemBody } from '../../support/client.js';
import { expectMatchesContract } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { inputsFor } from '../../support/jobs.js';
import { unsigned } from '../../support/media.js';
import { type S3Server, startS3Server } from '../../support/s3rver.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';

/** `STORAGE=s3` with `MEDIA_DELIVERY=presigned`: a valid media URL is answered with a redirect to the bucket. */
describe('media delivered by presigned bucket URLs', () => {
  let env: TestEnvironment;
  let s3: S3Server;
  let sut: RunningService;
  let client: Client;
  let ownerKey: string;
  let item: HistoryItemBody;

  beforeAll(async () => {
    env = await createTestEnvironment();
    s3 = await startS3Server();
    sut = await startService({ ...env.serviceEnv, ...s3.serviceEnv, MEDIA_DELIVERY: 'presigned' });
    ownerKey = await createUserWithKey(env.databaseUrl);
    client = new Client(sut.baseUrl, ownerKey);
    item = await client.waitForFinal(await client.createJob(await inputsFor('default')), 45_000);
    if (item.status !== 'complete') throw new Error(`the job ended ${JSON.stringify(item)}`);
  }, 90_000);

  afterAll(async () => {
    await sut?.stop();
    await s3?.stop();
    await env?.dispose();
  }, 60_000);

  /** The API's answer to a media path, not followed. */
  function media(path: string, headers: Record<string, string> = {}): Promise<Response> {
    return fetch(`${sut.baseUrl}/${path}`, { headers, redirect: 'manual' });
  }

  it('redirects a signed URL to a presigned GET of the bucket that expires no later than it', async () => {
    const response = await media(item.stock_url!);

    expect(response.status).toBe(302);
    await expectMatchesContract(response, 'GET', '/media/{id}/{file}');
    const location = new URL(response.headers.get('location')!);
    expect(location.origin).toBe(new URL(s3.endpoint).origin);
    expect(location.pathname).toBe(`/${s3.bucket}/${unsigned(item.stock_url!)}`);
    // The presigned URL was made at the answer and lives X-Amz-Expires seconds from X-Amz-Date.
    const amzDate = location.searchParams.get('X-Amz-Date')!;
    const signedAt = Date.parse(
      amzDate.replace(/^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/, '$1-$2-$3T$4:$5:$6Z'),
    );
    const bucketExpiry = signedAt + Number(location.searchParams.get('X-Amz-Expires')) * 1000;
    expect(bucketExpiry).toBeLessThanOrEqual(Date.parse(item.media_urls_expire_at!));
    expect(response.headers.get('cache-control')).toMatch(/^private, max-age=\d+$/);
  });

  it('serves the bytes from the bucket when the redirect is followed, cached privately', async () => {
    const response = await fetch(`${sut.baseUrl}/${item.stock_url}`);

    expect(response.status).toBe(200);
    expect(response.url.startsWith(s3.endpoint)).toBe(true);
    expect(response.headers.get('cache-control')).toMatch(/^private, max-age=\d+$/);
    expect((await sharp(Buffer.from(await response.arrayBuffer())).metadata()).format).toBe('jpeg');
  });

  it("redirects the owner's key too, and refuses what the proxy refuses", async () => {
    const byOwner = await media(unsigned(item.preview_url!), { Authorization: `Bearer ${ownerKey}` });
    expect(byOwner.status).toBe(302);
    const followed = await fetch(byOwner.headers.get('location')!);
    expect(followed.status).toBe(200);
    expect((await sharp(Buffer.from(await followed.arrayBuffer())).metadata()).format).toBe('webp');

    const unsignedAnswer = await media(unsigned(item.preview_url!));
    expect(unsignedAnswer.status).toBe(403);
    await expectMatchesContract(unsignedAnswer, 'GET', '/media/{id}/{file}');
  });

  it('answers 404, not a redirect, once the item is deleted', async () => {
    const other = await client.waitForFinal(await client.createJob(await inputsFor('default')), 45_000);
    expect(other.status).toBe('complete');
    const before = await media(other.stock_url!);
    expect(before.status).toBe(302);
    const presigned = before.headers.get('location')!;

    expect((await client.delete(other.history_item_id)).status).toBe(204);

    const after = await media(other.stock_url!);
    expect(after.status).toBe(404);
    await expectMatchesContract(after, 'GET', '/media/{id}/{file}');
    // And a presigned URL handed out before the delete finds nothing in the bucket.
    const stale = await fetch(presigned);
    expect(stale.status).toBe(404);
    await stale.arrayBuffer();
  }, 60_000);
});
