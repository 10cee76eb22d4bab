import sharp from 'sharp';
import { expectMatchesContract } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { inputsFor } from '../../support/jobs.js';
import { waitUntil } from '../../support/harness.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { filesUnder } from '../../support/uploads.js';
import { signedMediaPath, unsigned } from '../../support/media.js';
import { type RefusingProxy, type S3Server, startRefusingProxy, startS3Server } from '../../support/s3rver.js';
import { Client, type JobAcceptedBody, postJob, waitForFinal } from '../../support/client.js';

/** An API and a worker that share nothing but the database, Redis and the bucket, as on two hosts. */
describe('the service with STORAGE=s3', () => {
  let env: TestEnvironment;
  let s3: S3Server;
  let api: RunningService;
  let worker: RunningService | undefined;
  let apiKey: string;
  let serviceEnv: Record<string, string>;
  let bucketUrl: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    s3 = await startS3Server();
    bucketUrl = `${s3.endpoint}/${s3.bucket}`;
    serviceEnv = { ...env.serviceEnv, ...s3.serviceEnv, MEDIA_PUBLIC_BASE_URL: bucketUrl };
    api = await startService({ ...serviceEnv, ROLE: 'api' });
    apiKey = await createUserWithKey(env.databaseUrl);
  }, 60_000);

  afterAll(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    await s3?.stop();
    await env?.dispose();
  }, 60_000);

  it('keeps inputs and results in the bucket, serves them, and deletes them with the item', async () => {
    const response = await postJob(api.baseUrl, apiKey, await inputsFor('default'));
    expect(response.status).toBe(202);
    const { history_item_id: id, stock_image, preview_image } = (await response.json()) as JobAcceptedBody;

    // No worker yet: the job waits, its input already in the bucket's private prefix.
    expect(await s3.keys(`inputs/${id}-`)).toEqual([`inputs/${id}-image`]);

    worker = await startService({ ...serviceEnv, ROLE: 'worker' });
    const item = await waitForFinal(api.baseUrl, apiKey, id, 45_000);

    expect(item).toMatchObject({ status: 'complete', output_url: `${bucketUrl}/${item.stock_url}` });
    expect([unsigned(item.preview_url!), unsigned(item.stock_url!)]).toEqual([
      unsigned(preview_image),
      unsigned(stock_image),
    ]);
    expect(await s3.keys(`media/${id}/`)).toEqual([`media/${id}/preview.webp`, `media/${id}/stock.jpg`]);
    expect(await s3.keys(`inputs/${id}-`)).toEqual([]);

    const viaService = await fetch(`${api.baseUrl}/${stock_image}`);
    expect(viaService.status).toBe(200);
    await expectMatchesContract(viaService, 'GET', '/media/{id}/{file}');
    expect(viaService.headers.get('content-type')).toBe('image/jpeg');
    const stock = Buffer.from(await viaService.arrayBuffer());
    expect(Number(viaService.headers.get('content-length'))).toBe(stock.length);
    expect((await sharp(stock).metadata()).format).toBe('jpeg');
    const preview = await fetch(`${api.baseUrl}/${preview_image}`);
    expect(preview.headers.get('content-type')).toBe('image/webp');
    expect((await sharp(Buffer.from(await preview.arrayBuffer())).metadata()).format).toBe('webp');

    // output_url: the same bytes straight from the bucket (MEDIA_PUBLIC_BASE_URL, the operator's choice of public
    // results), with the headers a CDN would pass on: cached an hour at most, so a delete reaches it within one.
    const fromBucket = await fetch(item.output_url!);
    expect(fromBucket.status).toBe(200);
    expect(fromBucket.headers.get('content-type')).toBe('image/jpeg');
    expect(fromBucket.headers.get('cache-control')).toBe('public, max-age=3600');
    expect(Buffer.from(await fromBucket.arrayBuffer()).equals(stock)).toBe(true);

    const deleted = await new Client(api.baseUrl, apiKey).delete(id);
    expect(deleted.status).toBe(204);
    expect(await s3.keys(`media/${id}/`)).toEqual([]);
    expect((await fetch(`${api.baseUrl}/${stock_image}`)).status).toBe(404);

    // Nothing went to the local folders the local store would have used.
    expect(await filesUnder(env.serviceEnv.MEDIA_ROOT)).toEqual([]);
    expect(await filesUnder(env.serviceEnv.INPUT_ROOT)).toEqual([]);
  }, 90_000);

  it('keeps a stored file in the bucket, copies it into a job, and deletes it alone', async () => {
    const client = new Client(api.baseUrl, apiKey);
    const image = (await inputsFor('default')).image as { data: Buffer };

    const stored = await client.uploadFile(image.data);
    expect(stored.status).toBe(201);
    // Beside jobs' inputs, under the private prefix; never under media/.
    const key = `inputs/${stored.body.file_id}`;
    expect(await s3.keys(key)).toEqual([key]);
    const job = await client.createJson({ tool: 'default', inputs: { image: stored.body.file_id } });
    expect(job.status).toBe(202);

    expect((await client.deleteFile(stored.body.file_id)).status).toBe(204);
    expect(await s3.keys(key)).toEqual([]);
    worker ??= await startService({ ...serviceEnv, ROLE: 'worker' });
    expect((await waitForFinal(api.baseUrl, apiKey, job.body.history_item_id, 45_000)).status).toBe('complete');
    expect(await filesUnder(env.serviceEnv.INPUT_ROOT)).toEqual([]);
  }, 90_000);

  it('answers 404 for a media path the bucket does not have', async () => {
    const path = signedMediaPath(serviceEnv, '3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44', 'stock.jpg');
    const response = await fetch(`${api.baseUrl}/${path}`);

    expect(response.status).toBe(404);
    await expectMatchesContract(response, 'GET', '/media/{id}/{file}');
  });
});

describe('the service with STORAGE=s3, when the bucket refuses to remove files', () => {
  let env: TestEnvironment;
  let s3: S3Server;
  let proxy: RefusingProxy;
  let serviceEnv: Record<string, string>;
  let api: RunningService;
  let worker: RunningService | undefined;

  beforeAll(async () => {
    env = await createTestEnvironment();
    s3 = await startS3Server();
    proxy = await startRefusingProxy(s3);
    serviceEnv = { ...env.serviceEnv, ...s3.serviceEnv, S3_ENDPOINT: proxy.endpoint };
    [api, worker] = await Promise.all([
      startService({ ...serviceEnv, ROLE: 'api' }),
      startService({ ...serviceEnv, ROLE: 'worker' }),
    ]);
  }, 60_000);

  afterAll(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    await proxy?.close();
    await s3?.stop();
    await env?.dispose();
  }, 60_000);

  it('answers the delete 204, and a worker starting later removes the files once they are an hour old', async () => {
    const apiKey = await createUserWithKey(env.databaseUrl);
    const client = new Client(api.baseUrl, apiKey);
    const response = await postJob(api.baseUrl, apiKey, await inputsFor('default'));
    const { history_item_id: id } = (await response.json()) as JobAcceptedBody;
    expect(await waitForFinal(api.baseUrl, apiKey, id, 45_000)).toMatchObject({ status: 'complete' });
    const results = [`media/${id}/preview.webp`, `media/${id}/stock.jpg`];
    proxy.refused.add(id);

    const deleted = await client.delete(id);

    expect(deleted.status).toBe(204);
    expect((await client.get(id)).status).toBe(404);
    // Left behind with no row keeping them, for the sweep.
    expect(await s3.keys(`media/${id}/`)).toEqual(results);

    proxy.refused.delete(id);
    for (const key of results) await s3.backdate(key, 2 * 3600_000);
    await worker!.stop();
    worker = await startService({ ...serviceEnv, ROLE: 'worker' });
    await waitUntil(async () => (await s3.keys(`media/${id}/`)).length === 0, "the sweep of the item's files");
  }, 90_000);
});
