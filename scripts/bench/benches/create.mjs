/**
 * create: job creation throughput of the API (ROLE=api, no worker) against a bare node:http + busboy server
 * that reads the same multipart bodies to temporary files and runs sharp(file).metadata() on each.
 * Same client, same bodies (fashion_swap, two ~1024x1024 JPEGs), same concurrency, same duration: 8 s rounds,
 * alternating, twice each; the best round of each side is compared. With BENCH_BEFORE, that revision's service is a
 * third side, in an environment of its own (its database as its migrations make it).
 */
import { join } from 'node:path';
import {
  alternateLoads,
  benchBefore,
  createBenchEnv,
  createUserWithKey,
  describeLoad,
  fmtMs,
  log,
  makePhoto,
  multipartBody,
  NO_LIMITS,
  record,
  recordBefore,
  request,
  runLoad,
  sweepInputs,
} from '../lib.mjs';

const CONCURRENCY = 16;
const WARMUP_MS = 2_000;
const DURATION_MS = 8_000;
const ROUNDS = 2;
const SPREAD_MS = 6_000;
const PATH = '/generation/generate_image_v2/';

export const description = 'job creation req/s: service (ROLE=api) vs bare node:http + busboy + sharp.metadata()';

export async function run() {
  const [clothes, person] = await Promise.all([makePhoto('clothes', 1024, 1024), makePhoto('person', 1024, 1024)]);
  const form = multipartBody({
    tool: 'fashion_swap',
    clothes: { data: clothes, filename: 'clothes.jpg' },
    person: { data: person, filename: 'person.jpg' },
  });
  log(
    `  body: fashion_swap, clothes ${clothes.length} B + person ${person.length} B (1024x1024 JPEG), ${form.bytes} B in all`,
  );
  log(
    `  load: ${CONCURRENCY} keep-alive connections, ${WARMUP_MS / 1000} s warm-up + ${DURATION_MS / 1000} s measured, each`,
  );

  const env = await createBenchEnv();
  let stopSweeping;
  let beforeEnv;
  let stopSweepingBefore;
  try {
    // --- the service
    const settings = {
      ROLE: 'api',
      ...NO_LIMITS,
    };
    const service = await env.startService(settings);
    const { authorization } = await createUserWithKey(env.databaseUrl);
    const post = (headers) => ({
      method: 'POST',
      path: PATH,
      headers: { ...headers, 'Content-Type': form.contentType },
      body: form.body,
    });
    const target = (base, headers) => ({ url: base, requests: [post(headers)] });
    const probe = await request(undefined, {
      ...post({ Authorization: authorization }),
      url: `${service.baseUrl}${PATH}`,
    });
    if (probe.status !== 202) throw new Error(`the service refused the job: ${probe.status} ${probe.body}`);
    // No worker runs here; in service, a worker deletes a job's inputs once done, seconds after creation.
    // Without that, this API-only run would pile up gigabytes of inputs for the disk to write back.
    stopSweeping = sweepInputs(env.inputRoot);

    // Informational: the same load spread over 16 users (one key per connection), which tells the per-user
    // pending-limit lock apart from the per-request cost.
    const keys = [];
    for (let i = 0; i < CONCURRENCY; i++) keys.push((await createUserWithKey(env.databaseUrl)).authorization);
    const manyUsers = await runLoad({
      url: service.baseUrl,
      requests: keys.map((key) => post({ Authorization: key })),
      concurrency: CONCURRENCY,
      durationMs: SPREAD_MS,
    });
    log(`  ${describeLoad(`service, ${CONCURRENCY} users`, manyUsers)}`);

    const before = benchBefore();
    let serviceBefore;
    let beforeAuthorization;
    if (before) {
      beforeEnv = await createBenchEnv();
      serviceBefore = await beforeEnv.startService(settings, { main: before.main });
      beforeAuthorization = (await createUserWithKey(beforeEnv.databaseUrl)).authorization;
      stopSweepingBefore = sweepInputs(beforeEnv.inputRoot);
    }

    const baseline = await env.startScript(new URL('../baselines/upload-server.mjs', import.meta.url).pathname, {
      TMP_DIR: join(env.dataDir, 'baseline-tmp'),
    });
    const probe2 = await request(undefined, { ...post({}), url: `${baseline.baseUrl}${PATH}` });
    if (probe2.status !== 202) throw new Error(`the baseline refused the job: ${probe2.status} ${probe2.body}`);
    const {
      service: serviceResult,
      baseline: baselineResult,
      before: beforeResult,
    } = await alternateLoads(
      {
        service: { target: target(service.baseUrl, { Authorization: authorization }), pid: service.pid },
        baseline: { target: target(baseline.baseUrl, {}), pid: baseline.pid },
        ...(serviceBefore && {
          before: {
            target: target(serviceBefore.baseUrl, { Authorization: beforeAuthorization }),
            pid: serviceBefore.pid,
          },
        }),
      },
      { rounds: ROUNDS, concurrency: CONCURRENCY, durationMs: DURATION_MS, warmupMs: WARMUP_MS },
    );
    await service.stop();
    await serviceBefore?.stop();
    await baseline.stop();

    const ratio = serviceResult.rps / baselineResult.rps;
    record(
      'create',
      `service job creations/s (c=16, best of ${ROUNDS})`,
      serviceResult.rps,
      `${serviceResult.rps.toFixed(1)} req/s (p50 ${fmtMs(serviceResult.p50)}, p99 ${fmtMs(serviceResult.p99)})`,
    );
    record(
      'create',
      `baseline busboy+sharp req/s (c=16, best of ${ROUNDS})`,
      baselineResult.rps,
      `${baselineResult.rps.toFixed(1)} req/s (p50 ${fmtMs(baselineResult.p50)}, p99 ${fmtMs(baselineResult.p99)})`,
    );
    record(
      'create',
      `service req/s, load spread over ${CONCURRENCY} users (info)`,
      manyUsers.rps,
      `${manyUsers.rps.toFixed(1)} req/s (p50 ${fmtMs(manyUsers.p50)})`,
    );
    record(
      'create',
      'server CPU per request, service vs baseline (info)',
      serviceResult.cpuMsPerRequest,
      `${fmtMs(serviceResult.cpuMsPerRequest)} vs ${fmtMs(baselineResult.cpuMsPerRequest)}`,
    );
    record('create', 'service / baseline throughput', ratio, ratio.toFixed(2), {
      op: '>=',
      value: 0.5,
      text: '>= 0.5',
    });
    if (before) recordBefore('create', 'job creations/s', serviceResult, beforeResult, before.name);
    if (serviceResult.failed > 0 || baselineResult.failed > 0) {
      log(`  note: failed requests: service ${serviceResult.failed}, baseline ${baselineResult.failed}`);
    }
  } finally {
    await stopSweeping?.();
    await stopSweepingBefore?.();
    await env.dispose();
    await beforeEnv?.dispose();
  }
}
