/**
 * tracing: what traces cost. Three API processes (ROLE=api) on one database, side by side:
 * - `on`: tracing on, exporting (http/protobuf, OpenTelemetry's default) to a loopback collector
 *   (`baselines/otlp-sink.mjs`);
 * - `off`: this build with no OTLP endpoint set (no SDK started);
 * - `before`: the service as it was before tracing came in (the parent of the commit that added src/tracing.ts),
 *   built from git into a temporary directory with the same node_modules;
 * - `context`: `off` with one AsyncLocalStorage enabled at start and nothing else, for information: the part of
 *   `on`'s cost that is Node's context propagation (OpenTelemetry's context manager is an AsyncLocalStorage), which
 *   every request pays, traced or not (reads are not traced).
 * (Four processes in all, started together once a fifth has applied the migrations.) Two loads on each, alternating,
 * 4 s rounds, best round per side: job creation (16 connections, fashion_swap with two 1024x1024 JPEGs) and item GET
 * (50 connections, over the items the creations made), eight rounds each.
 * Targets: on / off >= 0.85, off / before >= 0.97.
 */
import { execFileSync } from 'node:child_process';
import pg from 'pg';
import {
  alternateLoads,
  buildRevision,
  createBenchEnv,
  createUserWithKey,
  fmtMs,
  log,
  makePhoto,
  multipartBody,
  NO_LIMITS,
  record,
  request,
  ROOT,
  sweepInputs,
} from '../lib.mjs';

const CREATE_CONNECTIONS = 16;
const GET_CONNECTIONS = 50;
const WARMUP_MS = 2_000;
const DURATION_MS = 4_000;
/**
 * The same side's rounds swing by up to a third on a shared 2-core machine, creations and reads alike, with the data
 * on disk or on tmpfs: eight short rounds give each side its quiet one, and each side runs twice in each place of the
 * round's order (alternateLoads turns it).
 */
const ROUNDS = 8;
const PATH = '/generation/generate_image_v2/';
const UNLIMITED = {
  ...NO_LIMITS,
};
/** Preloaded by the `context` side: enables AsyncLocalStorage's hooks as OpenTelemetry's first context switch does. */
const ENABLE_ASYNC_LOCAL_STORAGE = `--import=data:text/javascript,${encodeURIComponent(
  "import { AsyncLocalStorage } from 'node:async_hooks'; new AsyncLocalStorage().run({}, () => {});",
)}`;

export const description =
  'job creation and item GET req/s, ROLE=api: tracing on (exporting to a loopback collector) / off / before tracing';

/** The service as of the commit before src/tracing.ts was added: its dist/main.js. */
function buildBefore() {
  const added = execFileSync('git', ['log', '-n1', '--format=%H', '--diff-filter=A', '--', 'src/tracing.ts'], {
    cwd: ROOT,
    encoding: 'utf8',
  }).trim();
  if (!added) throw new Error('src/tracing.ts is not in the git history: nothing to compare with');
  return buildRevision(`${added}^`);
}

export async function run() {
  const [clothes, person] = await Promise.all([makePhoto('clothes', 1024, 1024), makePhoto('person', 1024, 1024)]);
  const form = multipartBody({
    tool: 'fashion_swap',
    clothes: { data: clothes, filename: 'clothes.jpg' },
    person: { data: person, filename: 'person.jpg' },
  });
  const env = await createBenchEnv('tracing');
  const db = new pg.Client({ connectionString: env.databaseUrl });
  let stopSweeping;
  try {
    const beforeMain = buildBefore();
    const collector = await env.startScript(new URL('../baselines/otlp-sink.mjs', import.meta.url).pathname);
    // A process of its own applies the migrations, and the sides start together after it, so that none is the one
    // started first, alone: of identical processes side by side, that one was the slowest in six trials of eight here,
    // by up to a third; started that way, `off` lost to `context`, which is `off` and more work.
    await (await env.startService({ ROLE: 'api' })).stop();
    const [off, on, before, context] = await Promise.all([
      env.startService({ ROLE: 'api', ...UNLIMITED }),
      env.startService({ ROLE: 'api', ...UNLIMITED, OTEL_EXPORTER_OTLP_ENDPOINT: collector.baseUrl }),
      env.startService({ ROLE: 'api', ...UNLIMITED }, { main: beforeMain }),
      env.startService({ ROLE: 'api', ...UNLIMITED, NODE_OPTIONS: ENABLE_ASYNC_LOCAL_STORAGE }),
    ]);
    const { authorization } = await createUserWithKey(env.databaseUrl);
    // No worker runs here: inputs are swept away as a worker would consume them.
    stopSweeping = sweepInputs(env.inputRoot);

    const sides = { on, off, before, context };
    const post = {
      method: 'POST',
      path: PATH,
      headers: { Authorization: authorization, 'Content-Type': form.contentType },
      body: form.body,
    };
    for (const [name, service] of Object.entries(sides)) {
      const probe = await request(undefined, { ...post, url: `${service.baseUrl}${PATH}` });
      if (probe.status !== 202) throw new Error(`${name} refused the job: ${probe.status} ${probe.body}`);
    }
    log(`  job creation: ${CREATE_CONNECTIONS} connections`);
    const created = await alternateLoads(
      Object.fromEntries(
        Object.entries(sides).map(([name, s]) => [name, { target: { url: s.baseUrl, requests: [post] }, pid: s.pid }]),
      ),
      { rounds: ROUNDS, concurrency: CREATE_CONNECTIONS, durationMs: DURATION_MS, warmupMs: WARMUP_MS },
    );

    await db.connect();
    const { rows } = await db.query('SELECT id FROM history_items ORDER BY random() LIMIT 1000');
    const ids = rows.map((row) => row.id);
    const items = ids.map((id) => ({
      path: `/user/generation-history/${id}`,
      headers: { Authorization: authorization },
    }));
    log(`  item GET: ${GET_CONNECTIONS} connections, ${ids.length} items`);
    const read = await alternateLoads(
      Object.fromEntries(
        Object.entries(sides).map(([name, s]) => [name, { target: { url: s.baseUrl, requests: items }, pid: s.pid }]),
      ),
      { rounds: ROUNDS, concurrency: GET_CONNECTIONS, durationMs: DURATION_MS, warmupMs: WARMUP_MS },
    );
    await on.stop();
    const exported = JSON.parse((await request(undefined, { url: `${collector.baseUrl}/stats` })).body.toString());
    log(`  the collector got ${exported.requests} export requests, ${(exported.bytes / 1e6).toFixed(1)} MB`);
    if (exported.requests === 0) throw new Error('tracing on exported nothing: the comparison would mean nothing');

    for (const [load, results] of [
      ['job creation', created],
      ['item GET', read],
    ]) {
      for (const [name, result] of Object.entries(results)) {
        record(
          'tracing',
          `${load} req/s, tracing ${name}`,
          result.rps,
          `${result.rps.toFixed(0)} req/s (p50 ${fmtMs(result.p50)}, CPU ${fmtMs(result.cpuMsPerRequest)}/request)`,
        );
      }
      const onOff = results.on.rps / results.off.rps;
      const offBefore = results.off.rps / results.before.rps;
      record('tracing', `${load}: on / off`, onOff, onOff.toFixed(2), { op: '>=', value: 0.85, text: '>= 0.85' });
      record('tracing', `${load}: off / before tracing`, offBefore, offBefore.toFixed(2), {
        op: '>=',
        value: 0.97,
        text: '>= 0.97',
      });
      const contextOff = results.context.rps / results.off.rps;
      record('tracing', `${load}: AsyncLocalStorage alone / off (info)`, contextOff, contextOff.toFixed(2));
    }
  } finally {
    stopSweeping?.();
    await db.end().catch(() => {});
    await env.dispose();
  }
}
