/**
 * inputs: JSON job creation naming two image URLs, which the API fetches from a loopback image server before it
 * answers, against multipart creation of the same two images, on the same API (ROLE=api, no worker). Same client,
 * same concurrency, same duration: 8 s rounds, alternating, twice each; the best round of each side is compared. The
 * image server runs in this process, beside the load generator.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';
import {
  alternateLoads,
  createBenchEnv,
  createUserWithKey,
  fmtMs,
  HOST,
  log,
  makePhoto,
  multipartBody,
  record,
  request,
  sweepInputs,
} from '../lib.mjs';

const CONCURRENCY = 16;
const WARMUP_MS = 2_000;
const DURATION_MS = 8_000;
const ROUNDS = 2;
const PATH = '/generation/generate_image_v2/';

export const description = 'JSON creation with two image URLs (fetched by the API) vs multipart of the same images';

export async function run() {
  const [clothes, person] = await Promise.all([makePhoto('clothes', 1024, 1024), makePhoto('person', 1024, 1024)]);
  const photos = { '/clothes.jpg': clothes, '/person.jpg': person };
  const images = createServer((req, res) => {
    const photo = photos[req.url];
    if (!photo) return void res.writeHead(404).end();
    res.writeHead(200, { 'Content-Type': 'image/jpeg', 'Content-Length': photo.length }).end(photo);
  });
  images.keepAliveTimeout = 60_000;
  images.listen(0, HOST);
  await once(images, 'listening');
  const origin = `http://${HOST}:${images.address().port}`;
  const form = multipartBody({
    tool: 'fashion_swap',
    clothes: { data: clothes, filename: 'clothes.jpg' },
    person: { data: person, filename: 'person.jpg' },
  });
  const json = JSON.stringify({
    tool: 'fashion_swap',
    inputs: { clothes: `${origin}/clothes.jpg`, person: `${origin}/person.jpg` },
  });
  log(`  images: clothes ${clothes.length} B + person ${person.length} B (1024x1024 JPEG), served from ${origin}`);

  const env = await createBenchEnv();
  let stopSweeping;
  try {
    const service = await env.startService({
      ROLE: 'api',
      LIMIT_MAX_PENDING: '1000000',
      LIMIT_CREATIONS_PER_MINUTE: '1000000',
      // The image server is on loopback over plain http: allowed as in development.
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    });
    const { authorization } = await createUserWithKey(env.databaseUrl);
    const byUrl = {
      method: 'POST',
      path: PATH,
      headers: { Authorization: authorization, 'Content-Type': 'application/json' },
      body: json,
    };
    const byUpload = {
      method: 'POST',
      path: PATH,
      headers: { Authorization: authorization, 'Content-Type': form.contentType },
      body: form.body,
    };
    for (const [name, sent] of Object.entries({ byUrl, byUpload })) {
      const probe = await request(undefined, { ...sent, url: `${service.baseUrl}${PATH}` });
      if (probe.status !== 202) throw new Error(`the service refused the ${name} job: ${probe.status} ${probe.body}`);
    }
    // No worker runs here: the inputs of the jobs made are swept as a worker's ends would remove them.
    stopSweeping = sweepInputs(env.inputRoot);
    const { urls, upload } = await alternateLoads(
      {
        urls: { target: { url: service.baseUrl, requests: [byUrl] }, pid: service.pid },
        upload: { target: { url: service.baseUrl, requests: [byUpload] }, pid: service.pid },
      },
      { rounds: ROUNDS, concurrency: CONCURRENCY, durationMs: DURATION_MS, warmupMs: WARMUP_MS },
    );
    await service.stop();

    record(
      'inputs',
      `JSON creations/s, two URL inputs (c=16, best of ${ROUNDS})`,
      urls.rps,
      `${urls.rps.toFixed(1)} req/s (p50 ${fmtMs(urls.p50)}, p99 ${fmtMs(urls.p99)})`,
    );
    record(
      'inputs',
      `multipart creations/s, same images (c=16, best of ${ROUNDS})`,
      upload.rps,
      `${upload.rps.toFixed(1)} req/s (p50 ${fmtMs(upload.p50)}, p99 ${fmtMs(upload.p99)})`,
    );
    const ratio = urls.rps / upload.rps;
    record('inputs', 'URL inputs / multipart throughput', ratio, ratio.toFixed(2), {
      op: '>=',
      value: 0.8,
      text: '>= 0.8',
    });
    if (urls.failed > 0 || upload.failed > 0) {
      log(
        `  note: failed requests: URL inputs ${urls.failed} (${JSON.stringify(urls.statuses)}), multipart ${upload.failed}`,
      );
    }
  } finally {
    await stopSweeping?.();
    await env.dispose();
    images.closeAllConnections();
    images.close();
  }
}
