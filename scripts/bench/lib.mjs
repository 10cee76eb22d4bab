/**
 * Shared pieces of the benchmark suite. The environment (database, Redis namespace, folders), the built service
 * (dist/main.js), users and keys come from the tests' harness (test/support, see testSupport), the load from
 * autocannon; here are what only the benches need: clean-up on interruption, baseline servers, multipart bodies,
 * synthetic images, CPU and RSS sampling, percentiles of other series and the results table.
 *
 * Everything talks to 127.0.0.1 only. Every loop is bounded in time and in count.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, mkdirSync, readFileSync, symlinkSync } from 'node:fs';
import { readdir, rm, stat } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import autocannon from 'autocannon';
import { build } from 'esbuild';
import sharp from 'sharp';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const DIST = join(ROOT, 'dist');
/** The Node flags of `npm run start:prod` (the heap limit), so the service runs here as it is deployed. */
const SERVICE_NODE_FLAGS = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'))
  .scripts['start:prod'].split(/\s+/)
  .filter((arg) => arg.startsWith('--'));

export const HOST = '127.0.0.1';

/** Service settings that lift every per-user limit, so a bench measures the service and not its refusals. */
export const NO_LIMITS = {
  LIMIT_MAX_PENDING: '1000000',
  LIMIT_CREATIONS_PER_MINUTE: '1000000',
  LIMIT_CONCURRENT_UPLOADS: '1000000',
  LIMIT_EVENT_STREAMS: '1000000',
  LIMIT_HELD_REQUESTS: '1000000',
};

/** Imports a module of the built service, e.g. `fromDist('common/api-key.js')`. */
export function fromDist(path) {
  return import(pathToFileURL(join(DIST, path)).href);
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const log = (...args) => console.log(...args);

// ---------------------------------------------------------------------------------------------------------
// Clean-up that runs even when a bench throws or the run is interrupted
// ---------------------------------------------------------------------------------------------------------

const cleanups = new Set();

/**
 * Registers a clean-up step; returns a function that runs it once and unregisters it. Every caller, also
 * one that comes while the step is under way, waits for the same run to finish.
 */
export function onCleanup(fn) {
  let running;
  const run = () => {
    // Unregistered only once finished, so a concurrent runAllCleanups() waits for it too.
    running ??= (async () => {
      try {
        await fn();
      } finally {
        cleanups.delete(run);
      }
    })();
    return running;
  };
  cleanups.add(run);
  return run;
}

export async function runAllCleanups() {
  // Newest first: processes stop before their database is dropped.
  for (const run of [...cleanups].reverse()) {
    try {
      await run();
    } catch (error) {
      console.error(`clean-up failed: ${error?.message ?? error}`);
    }
  }
}

for (const event of ['uncaughtException', 'unhandledRejection']) {
  process.on(event, (error) => {
    console.error(`${event}: ${error?.stack ?? error}`);
    runAllCleanups().finally(() => process.exit(1));
  });
}

/** Every child process started, so none outlives this one whatever the path to exit. */
const children = new Set();
process.on('exit', () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

let signalled = false;
/** True once the run was interrupted: its figures are incomplete and must not replace the last run's. */
export const interrupted = () => signalled;
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    if (signalled) process.exit(130);
    signalled = true;
    console.error(`\n${signal}: cleaning up...`);
    runAllCleanups().finally(() => process.exit(130));
  });
}

// ---------------------------------------------------------------------------------------------------------
// The tests' harness (test/support), bundled from TypeScript at run time
// ---------------------------------------------------------------------------------------------------------

const SUPPORT = join(DIST, 'bench');
let support;

/**
 * The modules of test/support the benches use, bundled with esbuild into dist/bench/ (their packages left external)
 * and imported. The bundles sit two folders below the root as test/support does, so their paths relative to their
 * own file (`../../dist/main.js`) hold.
 */
export function testSupport() {
  support ??= (async () => {
    const entries = ['service', 'environment', 'fake-comfyui'];
    await build({
      entryPoints: entries.map((name) => join(ROOT, 'test/support', `${name}.ts`)),
      outdir: SUPPORT,
      outExtension: { '.js': '.mjs' },
      bundle: true,
      platform: 'node',
      format: 'esm',
      packages: 'external',
      logLevel: 'warning',
    });
    const [service, environment, fakeComfy] = await Promise.all(
      entries.map((name) => import(pathToFileURL(join(SUPPORT, `${name}.mjs`)).href)),
    );
    return { ...service, ...environment, ...fakeComfy };
  })();
  return support;
}

export async function freePort() {
  return (await testSupport()).freePort();
}

/**
 * The tests' environment (a database, a Redis prefix, folders) with the processes started through it: `dispose()`
 * stops those, then removes the rest, also when the run fails or is interrupted.
 */
export async function createBenchEnv() {
  const test = await (await testSupport()).createTestEnvironment();
  const processes = new Set();
  const env = {
    ...test,
    inputRoot: test.serviceEnv.INPUT_ROOT,
    processes,
    /** Starts the built service with this environment's settings plus `extra`. */
    startService: (extra = {}, options = {}) => startService(env, extra, options),
    /** Starts a plain Node script (a baseline server) as a tracked child process. */
    startScript: (script, extra = {}) => startScript(env, script, extra),
    /** Runs a plain Node script (a baseline that is not a server) to its end; resolves with its output. */
    runScript,
  };
  env.dispose = onCleanup(async () => {
    for (const child of [...processes].reverse()) await child.stop().catch(() => {});
    await test.dispose();
  });
  return env;
}

// ---------------------------------------------------------------------------------------------------------
// Child processes: the service and baseline servers
// ---------------------------------------------------------------------------------------------------------

/**
 * A started child process as the benches use it; `stop()` sends SIGTERM, then SIGKILL after `graceMs`, and
 * resolves with the exit code.
 */
function track(env, { baseUrl, process: child, output }) {
  children.add(child);
  child.once('exit', () => children.delete(child));
  const exited = child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : once(child, 'exit');
  const handle = {
    baseUrl,
    process: child,
    pid: child.pid,
    output,
    async stop(graceMs = 15_000) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      }
      env.processes.delete(handle);
      return child.exitCode ?? child.signalCode;
    },
  };
  env.processes.add(handle);
  return handle;
}

/**
 * Runs the built service through the tests' `startService`, with the environment's settings plus `extra` (ROLE,
 * limits...) and the Node flags of `npm run start:prod` (plus BENCH_SERVICE_NODE_ARGS), as it is deployed.
 * `options.main` runs another build of the service instead (an earlier commit's, for a before/after bench).
 */
export async function startService(env, extra = {}, { main } = {}) {
  if (signalled) throw new Error('interrupted: not starting anything more');
  const nodeArgsFromEnv = process.env.BENCH_SERVICE_NODE_ARGS?.split(/\s+/).filter(Boolean) ?? [];
  // API processes run with the thread pool docker/compose.yml gives them (docs/operations.md, "Scale").
  const roleEnv = extra.ROLE === 'api' ? { UV_THREADPOOL_SIZE: '2' } : {};
  const service = await (
    await testSupport()
  ).startService(
    { ...env.serviceEnv, ...roleEnv, ...extra },
    60_000,
    [...SERVICE_NODE_FLAGS, ...nodeArgsFromEnv],
    main,
  );
  return track(env, service);
}

const git = (...args) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' }).trim();

/**
 * The service as of another revision, for a bench to run beside this build: its src, openapi, tsconfig.json and
 * package.json from git, compiled with this checkout's node_modules into a folder of the temporary directory named by
 * the commit (kept, so that later benches and runs reuse it). Resolves with its dist/main.js.
 */
export function buildRevision(revision) {
  const commit = git('rev-parse', '--verify', `${revision}^{commit}`);
  const dir = join(tmpdir(), `igs-bench-build-${commit}`);
  const main = join(dir, 'dist/main.js');
  if (existsSync(main)) return main;
  mkdirSync(dir, { recursive: true });
  execFileSync('sh', ['-c', `git archive "${commit}" src openapi tsconfig.json package.json | tar -x -C "${dir}"`], {
    cwd: ROOT,
  });
  if (!existsSync(join(dir, 'node_modules'))) symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  const started = performance.now();
  execFileSync(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', 'tsconfig.json'], { cwd: dir });
  log(
    `  built ${git('log', '-n1', '--format=%h %s', commit)} in ${((performance.now() - started) / 1000).toFixed(0)} s`,
  );
  return main;
}

/**
 * BENCH_BEFORE: a revision (a commit, tag or branch) that `create`, `history` and `latency` also run, side by side with
 * this build on the same machine, to show what a change did to their figures. Undefined when unset.
 */
export function benchBefore() {
  const revision = process.env.BENCH_BEFORE;
  if (!revision) return undefined;
  return { name: git('rev-parse', '--short', `${revision}^{commit}`), main: buildRevision(revision) };
}

/** Runs a bench-owned script (e.g. a baseline server) and waits for its GET /ready. */
export async function startScript(env, script, extra = {}, timeoutMs = 60_000) {
  if (signalled) throw new Error('interrupted: not starting anything more');
  const port = await freePort();
  const child = spawn(process.execPath, [script], {
    env: { PATH: process.env.PATH, HOST, ...extra, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: ROOT,
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const handle = track(env, { baseUrl: `http://${HOST}:${port}`, process: child, output: () => output });
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`${script} exited (${child.exitCode ?? child.signalCode}) while starting:\n${output}`);
    }
    const { status } = await request(undefined, { url: `${handle.baseUrl}/ready`, timeoutMs: 2000 }).catch(() => ({}));
    if (status === 200) return handle;
    await sleep(50);
  }
  await handle.stop(0);
  throw new Error(`${script} was not ready within ${timeoutMs} ms:\n${output}`);
}

/**
 * Runs a bench-owned script to its end with HOST plus `extra` as its environment. Resolves with
 * { stdout }; rejects when it fails or outlives `timeoutMs` (it is then killed).
 */
export function runScript(script, extra = {}, { timeoutMs = 300_000 } = {}) {
  if (signalled) throw new Error('interrupted: not starting anything more');
  const child = spawn(process.execPath, [script], {
    env: { PATH: process.env.PATH, HOST, ...extra },
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: ROOT,
  });
  children.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  return new Promise((resolve, reject) => {
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      if (code === 0) resolve({ stdout });
      else reject(new Error(`${script.split('/').pop()} ended with ${code ?? signal}:\n${stderr.slice(-4000)}`));
    });
  });
}

/** A user with a fresh key (the tests' `createUserWithKey`), and its `Authorization` header. */
export async function createUserWithKey(databaseUrl, name) {
  const key = await (await testSupport()).createUserWithKey(databaseUrl, name);
  return { key, authorization: `Bearer ${key}` };
}

// ---------------------------------------------------------------------------------------------------------
// Request bodies and images
// ---------------------------------------------------------------------------------------------------------

/**
 * A multipart/form-data body built once, so every request of a run sends the very same bytes.
 * `fields`: name -> string, or { data: Buffer, filename, contentType }.
 */
export function multipartBody(fields) {
  const boundary = `----igsbench${randomBytes(12).toString('hex')}`;
  const chunks = [];
  for (const [name, value] of Object.entries(fields)) {
    if (typeof value === 'string') {
      chunks.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`));
    } else {
      chunks.push(
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="${value.filename ?? `${name}.jpg`}"\r\n` +
            `Content-Type: ${value.contentType ?? 'image/jpeg'}\r\n\r\n`,
        ),
        value.data,
        Buffer.from('\r\n'),
      );
    }
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  const body = Buffer.concat(chunks);
  return { body, contentType: `multipart/form-data; boundary=${boundary}`, bytes: body.length };
}

const svg = (w, h, body) =>
  Buffer.from(`<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 600 600">${body}</svg>`);

/** A standing figure on a light studio backdrop (the try-on tools look for a body on a plain background). */
const PERSON = `
  <rect width="600" height="600" fill="#e4e7ea"/>
  <ellipse cx="300" cy="62" rx="28" ry="36" fill="#d9a383"/>
  <path d="M286 96 L314 96 L316 120 L284 120 Z" fill="#d9a383"/>
  <path d="M236 128 Q240 118 284 116 L316 116 Q360 118 364 128 L356 190 Q350 240 358 290 L242 290 Q250 240 244 190 Z" fill="#d9a383"/>
  <path d="M236 128 Q214 130 210 152 L198 250 L192 316 Q194 332 206 330 Q214 326 214 312 L220 252 L236 178 Z" fill="#cf9878"/>
  <path d="M364 128 Q386 130 390 152 L402 250 L408 316 Q406 332 394 330 Q386 326 386 312 L380 252 L364 178 Z" fill="#cf9878"/>
  <path d="M242 288 L299 288 L298 306 L290 560 L258 560 L246 420 Z" fill="#2f4a78"/>
  <path d="M301 288 L358 288 L354 420 L342 560 L310 560 L302 306 Z" fill="#2f4a78"/>
  <path d="M256 556 L290 556 L292 572 L246 572 Z M310 556 L344 556 L354 572 L308 572 Z" fill="#26262a"/>`;

/** A t-shirt laid flat on white. */
const CLOTHES = `
  <rect width="600" height="600" fill="#ffffff"/>
  <path d="M252 88 L178 108 L92 200 L138 252 L186 214 L190 522 L410 522 L414 214 L462 252 L508 200 L422 108 L348 88
           Q300 140 252 88 Z" fill="#c9573e"/>
  <path d="M252 88 Q300 140 348 88 L338 86 Q300 124 262 86 Z" fill="#9b3a27"/>
  <path d="M230 250 Q250 380 236 500 M372 260 Q352 380 366 500" stroke="#8e3424" stroke-width="6" fill="none" opacity="0.3"/>
  <circle cx="300" cy="230" r="36" fill="#f4e9dc"/>`;

/**
 * A photo-like JPEG of `kind` ('person' | 'clothes') at width x height: the drawing plus mild sensor noise
 * (+-`noise` levels), so it compresses like a photo rather than like flat vector art.
 */
export async function makePhoto(kind, width, height, { noise = 6, quality = 88 } = {}) {
  const { data, info } = await sharp(svg(width, height, kind === 'person' ? PERSON : CLOTHES))
    .resize(width, height, { fit: 'fill' })
    .removeAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true });
  addNoise(data, noise, kind === 'person' ? 1 : 2);
  return sharp(data, { raw: { width: info.width, height: info.height, channels: 3 } })
    .jpeg({ quality })
    .toBuffer();
}

function addNoise(data, amplitude, seed) {
  if (amplitude <= 0) return;
  let state = seed * 2654435761;
  for (let i = 0; i < data.length; i++) {
    state = (state * 1103515245 + 12345) >>> 0;
    const v = data[i] + ((state >>> 16) % (2 * amplitude + 1)) - amplitude;
    data[i] = v < 0 ? 0 : v > 255 ? 255 : v;
  }
}

/**
 * A near-incompressible JPEG of side x side pixels (pure noise) and about `targetBytes`: the highest quality
 * (from 95 down) whose file is at most `targetBytes` is taken. Used where upload size, not content, matters.
 */
export async function makeNoiseJpeg(targetBytes, side = 3000) {
  const data = randomBytes(side * side * 3);
  let jpeg;
  for (const quality of [95, 94, 93, 92, 91, 90, 88, 85, 80, 70, 60, 50]) {
    jpeg = await sharp(data, { raw: { width: side, height: side, channels: 3 } })
      .jpeg({ quality, chromaSubsampling: '4:2:0' })
      .toBuffer();
    if (jpeg.length <= targetBytes) return { jpeg, side, quality };
  }
  return { jpeg, side, quality: 50 };
}

// ---------------------------------------------------------------------------------------------------------
// HTTP client and load generator
// ---------------------------------------------------------------------------------------------------------

export function keepAliveAgent(maxSockets = 64) {
  return new http.Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets });
}

function assertLoopback(url) {
  if (url.hostname !== HOST && url.hostname !== 'localhost') {
    throw new Error(`refusing to send traffic to ${url.hostname}: benches talk to ${HOST} only`);
  }
}

/**
 * One request. Resolves with { status, body (Buffer), ms } once the whole response is read; rejects on
 * network errors and after `timeoutMs`.
 */
export function request(agent, { url, method = 'GET', headers = {}, body, timeoutMs = 30_000 }) {
  const target = typeof url === 'string' ? new URL(url) : url;
  assertLoopback(target);
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = http.request(
      {
        hostname: target.hostname,
        port: target.port,
        path: target.pathname + target.search,
        method,
        agent: agent ?? false,
        headers: body ? { ...headers, 'Content-Length': body.length } : headers,
        timeout: timeoutMs,
      },
      (res) => {
        const chunks = [];
        res.on('data', (chunk) => chunks.push(chunk));
        res.on('end', () =>
          resolve({ status: res.statusCode, body: Buffer.concat(chunks), ms: performance.now() - started }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`request timed out after ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end(body);
  });
}

export async function requestJson(agent, options) {
  const response = await request(agent, options);
  let json;
  try {
    json = JSON.parse(response.body.toString() || 'null');
  } catch {
    json = undefined;
  }
  return { ...response, json };
}

/** A job creation: `form` a multipartBody, sent with `authorization` (`Bearer <key>`); resolves requestJson's answer. */
export function postJob(agent, baseUrl, authorization, form) {
  return requestJson(agent, {
    url: `${baseUrl}/generation/generate_image_v2/`,
    method: 'POST',
    headers: { Authorization: authorization, 'Content-Type': form.contentType },
    body: form.body,
  });
}

/**
 * Closed-loop load from autocannon: `concurrency` keep-alive connections, each sending its next request as soon as
 * the previous answer is read, for `durationMs`. `target`: `{ url, method, headers, body }`, or `{ url, requests }`
 * (`url` the origin, `requests` a list of `{ method, path, headers, body }` each connection sends in turn).
 *
 * Returns { sent, ok, failed, statuses, errors, seconds, rps (2xx answers a second), p50, p99 (ms, 2xx) }.
 */
export async function runLoad({ concurrency, durationMs, timeoutMs = 30_000, ...target }) {
  assertLoopback(new URL(target.url));
  const latencies = [];
  const errors = {};
  const instance = autocannon({
    ...target,
    connections: concurrency,
    duration: durationMs / 1000,
    timeout: timeoutMs / 1000,
    // autocannon stops at the first sample after the duration: short samples keep the window close to it.
    sampleInt: 100,
  });
  // autocannon's own latency histogram keeps whole milliseconds, too coarse for answers that take one or two: the
  // 2xx answers' times are taken from its response events instead, to the microsecond.
  instance.on('response', (_client, status, _bytes, ms) => {
    if (status >= 200 && status < 300) latencies.push(ms);
  });
  instance.on('reqError', (error) => {
    const message = String(error?.code ?? error?.message ?? error);
    errors[message] = (errors[message] ?? 0) + 1;
  });
  const result = await instance;
  latencies.sort((a, b) => a - b);
  const ok = result['2xx'];
  const failed = result.non2xx + result.errors;
  return {
    sent: ok + failed,
    ok,
    failed,
    statuses: Object.fromEntries(Object.entries(result.statusCodeStats).map(([status, { count }]) => [status, count])),
    errors,
    seconds: result.duration,
    rps: ok / result.duration,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
  };
}

/**
 * Closed-loop load on several servers in turn, `rounds` times, after one warm-up each, with every round and the best
 * rounds' CPU per request printed. `sides`: name -> { target, pid } (`target` as for runLoad). Each round starts one
 * side further along (A B C, B C A, C A B...; two sides: A B, B A), so that no side always runs right after the same
 * other one, or first: a round inherits the previous one's leftovers (PostgreSQL's writes, files to sweep). Other
 * work on the machine only ever slows a round down, so a side's best round (most req/s) is the closest to its real
 * cost. Returns name -> the best round's result: runLoad's plus `cpuMsPerRequest` (the server
 * process's CPU over the round per 2xx answer; PostgreSQL and Redis not included).
 */
export async function alternateLoads(sides, { rounds = 2, concurrency, durationMs, warmupMs }) {
  const entries = Object.entries(sides);
  const results = Object.fromEntries(entries.map(([name]) => [name, []]));
  for (const [, { target }] of entries) await runLoad({ ...target, concurrency, durationMs: warmupMs });
  for (let round = 0; round < rounds; round++) {
    const start = round % entries.length;
    for (const [name, { target, pid }] of [...entries.slice(start), ...entries.slice(0, start)]) {
      const [result, cpu] = await withCpu(pid, () => runLoad({ ...target, concurrency, durationMs }));
      log(`  ${describeLoad(name.padEnd(8), result)}`);
      results[name].push({ ...result, cpuMsPerRequest: cpu / result.ok });
    }
  }
  const best = Object.fromEntries(
    Object.entries(results).map(([name, list]) => [name, list.reduce((a, b) => (b.rps > a.rps ? b : a))]),
  );
  const cpu = Object.entries(best).map(([name, result]) => `${name} ${fmtMs(result.cpuMsPerRequest)}`);
  log(`  server process CPU per request (user+sys, all threads; best rounds): ${cpu.join(', ')}`);
  return best;
}

/**
 * Nearest-rank percentile of an ascending array (NaN when empty), for the series autocannon does not time (jobs
 * followed to the end, events, sequential requests) and for its answers' times (see runLoad).
 */
export function percentile(sorted, p) {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

export function summarize(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mean = sorted.reduce((sum, v) => sum + v, 0) / (sorted.length || 1);
  return {
    n: sorted.length,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1],
    min: sorted[0],
    mean,
  };
}

export function describeLoad(name, result) {
  const statuses = Object.entries(result.statuses)
    .map(([status, count]) => `${status}x${count}`)
    .join(' ');
  const errors = Object.entries(result.errors)
    .map(([error, count]) => `${error}x${count}`)
    .join(' ');
  return (
    `${name}: ${result.rps.toFixed(1)} req/s (${result.ok} ok, ${result.failed} failed in ${result.seconds.toFixed(1)} s)` +
    ` p50 ${fmtMs(result.p50)} p99 ${fmtMs(result.p99)} [${statuses}${errors ? ` errors: ${errors}` : ''}]`
  );
}

export const fmtMs = (ms) => (Number.isFinite(ms) ? `${ms < 10 ? ms.toFixed(2) : ms.toFixed(1)} ms` : 'n/a');
export const fmtMb = (kb) => `${(kb / 1024).toFixed(1)} MB`;

// ---------------------------------------------------------------------------------------------------------
// Process memory
// ---------------------------------------------------------------------------------------------------------

/** VmRSS of a process, in kB (undefined once it is gone). */
export function rssKb(pid) {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const match = /^VmRSS:\s+(\d+) kB/m.exec(status);
    return match ? Number(match[1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * CPU time (user + system, all threads) a process has used so far, in ms, from /proc/<pid>/stat.
 * The difference over a load window divided by the requests served is a per-request cost that other work
 * on the machine disturbs far less than req/s.
 */
export function cpuMs(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
  } catch {
    return Number.NaN;
  }
}
const CLOCK_TICKS = 100; // USER_HZ on Linux

/** Runs `fn` and returns [its result, the CPU ms `pid` used meanwhile]. */
export async function withCpu(pid, fn) {
  const before = cpuMs(pid);
  const result = await fn();
  return [result, cpuMs(pid) - before];
}

/** Samples a process's RSS every `intervalMs` until `stop()`, which returns [{ t (ms), kb }]. */
export function sampleRss(pid, intervalMs = 100) {
  const samples = [];
  const started = performance.now();
  const take = () => {
    const kb = rssKb(pid);
    if (kb !== undefined) samples.push({ t: performance.now() - started, kb });
  };
  take();
  const timer = setInterval(take, intervalMs);
  return {
    samples,
    stop() {
      clearInterval(timer);
      take();
      return samples;
    },
  };
}

// ---------------------------------------------------------------------------------------------------------
// Housekeeping during a run
// ---------------------------------------------------------------------------------------------------------

/**
 * Removes uploaded inputs older than `minAgeMs` from the input store every `intervalMs`, so an API-only run
 * (whose jobs are never processed) does not fill the disk. Returns stop().
 */
export function sweepInputs(inputRoot, { intervalMs = 1000, minAgeMs = 3000 } = {}) {
  let stopped = false;
  let running;
  const sweep = async () => {
    let entries;
    try {
      entries = await readdir(inputRoot);
    } catch {
      return;
    }
    const now = Date.now();
    for (const entry of entries) {
      const path = join(inputRoot, entry);
      try {
        if (now - (await stat(path)).mtimeMs > minAgeMs) await rm(path, { recursive: true, force: true });
      } catch {
        // gone already
      }
    }
  };
  const timer = setInterval(() => {
    if (!stopped && !running) running = sweep().finally(() => (running = undefined));
  }, intervalMs);
  return async () => {
    stopped = true;
    clearInterval(timer);
    await running;
  };
}

// ---------------------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------------------

/** Every figure printed by the benches of this run, for the final table. */
export const results = [];

/**
 * Records one figure. `target`: { op: '>=' | '<=', value, text } or undefined (an informational figure).
 * Never asserts: a missed target is printed, not thrown.
 */
export function record(bench, figure, value, display, target) {
  const met =
    target && Number.isFinite(value) ? (target.op === '>=' ? value >= target.value : value <= target.value) : undefined;
  const row = { bench, figure, value, display, target: target?.text ?? '', met };
  results.push(row);
  const mark = met === undefined ? '' : met ? '  [target met]' : '  [TARGET MISSED]';
  log(`  => ${figure}: ${display}${target ? `  (target ${target.text})` : ''}${mark}`);
  return row;
}

/**
 * The row of a BENCH_BEFORE side run with alternateLoads: this build's best round over the revision's (req/s, higher is
 * better), with the CPU each spent per request.
 */
export function recordBefore(bench, what, now, before, revision) {
  const ratio = now.rps / before.rps;
  record(
    bench,
    `${what}, this build / ${revision} (BENCH_BEFORE)`,
    ratio,
    `${ratio.toFixed(2)} (${now.rps.toFixed(0)} / ${before.rps.toFixed(0)} req/s; CPU per request ${fmtMs(now.cpuMsPerRequest)} vs ${fmtMs(before.cpuMsPerRequest)})`,
  );
}

/**
 * Follows `GET /user/events` (the caller's every item change) and calls `onItem(item, receivedAt)` for each `item`
 * event. Resolves once the stream is open, with a function that closes it.
 */
export function followUserEvents(baseUrl, authorization, onItem) {
  return new Promise((resolve, reject) => {
    const req = http.get(
      `${baseUrl}/user/events`,
      { headers: { Authorization: authorization }, agent: false },
      (res) => {
        if (res.statusCode !== 200) return reject(new Error(`GET /user/events answered ${res.statusCode}`));
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk) => {
          const receivedAt = Date.now();
          text += chunk;
          let end;
          while ((end = text.indexOf('\n\n')) >= 0) {
            const event = text.slice(0, end);
            text = text.slice(end + 2);
            const data = /^data: (.*)$/m.exec(event);
            if (/^event: item$/m.test(event) && data) onItem(JSON.parse(data[1]), receivedAt);
          }
        });
        resolve(() => req.destroy());
      },
    );
    req.on('error', reject);
  });
}
