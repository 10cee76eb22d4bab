/**
 * upload-rss: memory of the API (ROLE=api) under 50 concurrent uploads of two ~8 MB near-incompressible
 * JPEGs (3000x3000 noise) each, repeated for 15 s. The API process's VmRSS is sampled every 100 ms.
 * Peak = highest sample; steady = median of the samples in the second half of the load window.
 *
 * The jobs are never processed (no worker), so their stored inputs are swept away during the run to keep
 * the disk from filling; their rows stay.
 */
import {
  createBenchEnv,
  createUserWithKey,
  describeLoad,
  fmtMb,
  log,
  makeNoiseJpeg,
  multipartBody,
  NO_LIMITS,
  percentile,
  record,
  request,
  rssKb,
  runLoad,
  sampleRss,
  sleep,
  sweepInputs,
} from '../lib.mjs';

const CLIENTS = 50;
const DURATION_MS = 15_000;
const TARGET_FILE_BYTES = 8_400_000; // under the 10 MiB UPLOAD_MAX_FILE_BYTES default

export const description = `API RSS under ${CLIENTS} concurrent fashion_swap uploads of 2 x ~8 MB, ${DURATION_MS / 1000} s, ROLE=api`;

export async function run() {
  const clothes = await makeNoiseJpeg(TARGET_FILE_BYTES);
  const person = await makeNoiseJpeg(TARGET_FILE_BYTES);
  const form = multipartBody({
    tool: 'fashion_swap',
    clothes: { data: clothes.jpeg, filename: 'clothes.jpg' },
    person: { data: person.jpeg, filename: 'person.jpg' },
  });
  log(
    `  body: ${clothes.side}x${clothes.side} noise JPEGs at q${clothes.quality}/q${person.quality}: ` +
      `${(clothes.jpeg.length / 1e6).toFixed(2)} MB + ${(person.jpeg.length / 1e6).toFixed(2)} MB = ${(form.bytes / 1e6).toFixed(2)} MB a request`,
  );

  const env = await createBenchEnv();
  try {
    const service = await env.startService({
      ROLE: 'api',
      ...NO_LIMITS,
    });
    const { authorization } = await createUserWithKey(env.databaseUrl);
    const target = {
      url: `${service.baseUrl}/generation/generate_image_v2/`,
      method: 'POST',
      headers: { Authorization: authorization, 'Content-Type': form.contentType },
      body: form.body,
    };
    const probe = await request(undefined, target);
    if (probe.status !== 202) throw new Error(`the service refused the upload: ${probe.status} ${probe.body}`);
    await sleep(1000);
    const idleKb = rssKb(service.pid);

    const stopSweeping = sweepInputs(env.inputRoot);
    const sampler = sampleRss(service.pid, 100);
    const loadStarted = performance.now();
    const result = await runLoad({ ...target, concurrency: CLIENTS, durationMs: DURATION_MS, timeoutMs: 60_000 });
    const loadMs = performance.now() - loadStarted;
    await sleep(2000);
    const samples = sampler.stop();
    await stopSweeping();
    log(`  ${describeLoad('uploads', result)}`);
    log(`  ${((result.ok * form.bytes) / 1e6 / result.seconds).toFixed(0)} MB/s of request bodies accepted`);

    const during = samples.filter((s) => s.t <= loadMs);
    const peak = Math.max(...during.map((s) => s.kb));
    const secondHalf = during
      .filter((s) => s.t >= loadMs / 2)
      .map((s) => s.kb)
      .sort((a, b) => a - b);
    const steady = percentile(secondHalf, 50);
    const after = samples[samples.length - 1].kb;
    log(
      `  RSS: idle ${fmtMb(idleKb)}, peak ${fmtMb(peak)}, steady (median of 2nd half) ${fmtMb(steady)}, ` +
        `2 s after ${fmtMb(after)}; ${samples.length} samples`,
    );
    const timeline = [];
    for (let t = 0; t <= loadMs + 2000; t += 1000) {
      const window = samples.filter((s) => s.t >= t && s.t < t + 1000);
      if (window.length) timeline.push(Math.round(Math.max(...window.map((s) => s.kb)) / 1024));
    }
    log(`  RSS max per second (MB): ${timeline.join(' ')}`);

    record('upload-rss', `API peak RSS (${CLIENTS} x 2 x 8 MB uploads)`, peak / 1024, fmtMb(peak), {
      op: '<=',
      value: 300,
      text: '<= 300 MB',
    });
    record('upload-rss', 'API steady RSS under upload load', steady / 1024, `${fmtMb(steady)} (idle ${fmtMb(idleKb)})`);
    record('upload-rss', 'uploads accepted/s', result.rps, `${result.rps.toFixed(1)} req/s, ${result.failed} failed`);
    await service.stop();
  } finally {
    await env.dispose();
  }
}
