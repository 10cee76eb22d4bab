/**
 * Shared pieces of the benchmark suite: throwaway database + Redis namespace, starting the built service
 * (dist/main.js) and baseline servers as child processes, API keys, multipart bodies, synthetic images, a
 * keep-alive load generator, percentiles, RSS sampling and the results table.
 *
 * Everything talks to 127.0.0.1 only. Every loop is bounded in time and in count.
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import http from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Redis } from 'ioredis';
import pg from 'pg';
import sharp from 'sharp';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const DIST = join(ROOT, 'dist');
const MAIN = join(DIST, 'main.js');
/** The Node flags of `npm run start:prod` (the heap limit), so the service runs here as it is deployed. */
const SERVICE_NODE_FLAGS = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'))
  .scripts['start:prod'].split(/\s+/)
  .filter((arg) => arg.startsWith('--'));

export const ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/postgres';
export const REDIS_URL = 'redis://127.0.0.1:6379';
export const HOST = '127.0.0.1';

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
// Environment: database, Redis namespace, data directory
// ---------------------------------------------------------------------------------------------------------

/**
 * A database `igs_bench_<random>`, a Redis prefix of the same name and a temporary directory. `dispose()`
 * stops the processes started through it, then removes all three.
 */
export async function createBenchEnv(label = 'bench') {
  const name = `igs_bench_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  const dataDir = await mkdtemp(join(tmpdir(), `${name}-`));
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  const databaseUrl = url.toString();
  const processes = new Set();

  const env = {
    name,
    label,
    databaseUrl,
    redisPrefix: name,
    dataDir,
    inputRoot: join(dataDir, 'inputs'),
    serviceEnv: {
      DATABASE_URL: databaseUrl,
      REDIS_URL,
      REDIS_PREFIX: name,
      MEDIA_ROOT: join(dataDir, 'media'),
      INPUT_ROOT: join(dataDir, 'inputs'),
      UPLOAD_TMP_DIR: join(dataDir, 'tmp'),
      LOG_LEVEL: 'warn',
      HOST,
    },
    processes,
    /** Starts the built service with this environment's settings plus `extra`. */
    startService: (extra = {}, options = {}) => startService(env, extra, options),
    /** Starts a plain Node script (a baseline server) as a tracked child process. */
    startScript: (script, extra = {}, options = {}) => startScript(env, script, extra, options),
    /** Runs a plain Node script (a baseline that is not a server) to its end; resolves with its output. */
    runScript: (script, extra = {}, options = {}) => runScript(script, extra, options),
    dispose: undefined,
  };
  env.dispose = onCleanup(async () => {
    for (const child of [...processes].reverse()) await child.stop().catch(() => {});
    await deleteRedisNamespace(name);
    const cleanup = new pg.Client({ connectionString: ADMIN_URL });
    await cleanup.connect();
    try {
      await cleanup.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    } finally {
      await cleanup.end();
    }
    await rm(dataDir, { recursive: true, force: true });
  });
  return env;
}

async function deleteRedisNamespace(prefix) {
  const redis = new Redis(REDIS_URL);
  try {
    let cursor = '0';
    let rounds = 0;
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
      if (keys.length > 0) await redis.del(...keys);
      cursor = next;
    } while (cursor !== '0' && ++rounds < 100_000);
  } finally {
    redis.disconnect();
  }
}

export async function freePort() {
  const server = createServer();
  server.listen(0, HOST);
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

// ---------------------------------------------------------------------------------------------------------
// Child processes: the service and baseline servers
// ---------------------------------------------------------------------------------------------------------

function spawnTracked(env, args, childEnv, { name, readyPath, timeoutMs = 60_000, port }) {
  if (signalled) throw new Error('interrupted: not starting anything more');
  const child = spawn(process.execPath, args, {
    env: { PATH: process.env.PATH, ...childEnv, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: ROOT,
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  let output = '';
  const keep = (chunk) => {
    output += chunk.toString();
    if (output.length > 200_000) output = output.slice(-100_000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)));
  const handle = {
    name,
    child,
    pid: child.pid,
    port,
    baseUrl: `http://${HOST}:${port}`,
    output: () => output,
    exited,
    async stop(signal = 'SIGTERM', graceMs = 15_000) {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill(signal);
        const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      }
      env.processes.delete(handle);
      return exited;
    },
  };
  env.processes.add(handle);
  handle.ready = (async () => {
    const started = performance.now();
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`${name} exited (${child.exitCode ?? child.signalCode}) while starting:\n${output}`);
      }
      try {
        const { status } = await request(undefined, { url: `${handle.baseUrl}${readyPath}`, timeoutMs: 2000 });
        if (status === 200) {
          handle.bootMs = performance.now() - started;
          return handle;
        }
      } catch {
        // not listening yet
      }
      await sleep(50);
    }
    await handle.stop('SIGKILL');
    throw new Error(`${name} was not ready within ${timeoutMs} ms:\n${output}`);
  })();
  // Whoever awaits `ready` still sees a failure; an unawaited one must not end the run before clean-up.
  handle.ready.catch(() => {});
  return handle;
}

/**
 * Runs `node dist/main.js` (the built service) with the flags of `npm run start:prod`, the environment's settings
 * plus `extra` (ROLE, limits...), and waits for /health/ready. `options.nodeArgs` go before the script (e.g.
 * --cpu-prof); `options.main` runs another build of the service instead (an earlier commit's).
 */
export async function startService(env, extra = {}, { nodeArgs = [], wait = true, timeoutMs, main = MAIN } = {}) {
  const port = await freePort();
  const nodeArgsFromEnv = process.env.BENCH_SERVICE_NODE_ARGS?.split(/\s+/).filter(Boolean) ?? [];
  // API processes run with the thread pool docker/compose.yml gives them (docs/operations.md, "Scale").
  const roleEnv = extra.ROLE === 'api' ? { UV_THREADPOOL_SIZE: '2' } : {};
  const handle = spawnTracked(
    env,
    [...SERVICE_NODE_FLAGS, ...nodeArgsFromEnv, ...nodeArgs, main],
    { ...env.serviceEnv, ...roleEnv, ...extra },
    {
      name: `service(${extra.ROLE ?? 'all'})`,
      readyPath: '/health/ready',
      timeoutMs,
      port,
    },
  );
  if (wait) await handle.ready;
  return handle;
}

/** Runs a bench-owned script (e.g. a baseline server) and waits for its GET /ready. */
export async function startScript(env, script, extra = {}, { nodeArgs = [], timeoutMs } = {}) {
  const port = await freePort();
  const handle = spawnTracked(
    env,
    [...nodeArgs, script],
    { HOST, ...extra },
    {
      name: script.split('/').pop(),
      readyPath: '/ready',
      timeoutMs,
      port,
    },
  );
  await handle.ready;
  return handle;
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

// ---------------------------------------------------------------------------------------------------------
// Users and API keys (written straight to the database, after the service has migrated it)
// ---------------------------------------------------------------------------------------------------------

export async function createUserWithKey(databaseUrl, name = `bench-${randomUUID()}`) {
  const { generateApiKey, hashApiKey, lookupPrefix } = await fromDist('common/api-key.js');
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const userId = randomUUID();
    await client.query('INSERT INTO users (id, name) VALUES ($1, $2)', [userId, name]);
    const key = generateApiKey();
    await client.query('INSERT INTO api_keys (id, user_id, prefix, key_hash) VALUES ($1, $2, $3, $4)', [
      randomUUID(),
      userId,
      lookupPrefix(key),
      hashApiKey(key),
    ]);
    return { userId, key, authorization: `Bearer ${key}` };
  } finally {
    await client.end();
  }
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

/**
 * Closed-loop load: `concurrency` virtual clients, each sending its next request as soon as the previous
 * answer is read, until `durationMs` has passed or `maxRequests` were sent. `make(i)` returns the i-th
 * request's options ({ url, method, headers, body }).
 *
 * Returns { ok, failed, statuses, errors, seconds, rps (2xx answers a second), latencies (ms, 2xx), p50, p99 }.
 */
export async function runLoad({ make, concurrency, durationMs, maxRequests = 1_000_000, timeoutMs = 30_000, agent }) {
  const ownAgent = !agent;
  agent ??= keepAliveAgent(concurrency);
  const statuses = {};
  const errors = {};
  const latencies = [];
  let sent = 0;
  let ok = 0;
  let failed = 0;
  const started = performance.now();
  const end = started + durationMs;
  const client = async () => {
    while (performance.now() < end && sent < maxRequests) {
      const options = make(sent++);
      try {
        const { status, ms } = await request(agent, { timeoutMs, ...options });
        statuses[status] = (statuses[status] ?? 0) + 1;
        if (status >= 200 && status < 300) {
          ok++;
          latencies.push(ms);
        } else failed++;
      } catch (error) {
        failed++;
        const message = String(error?.code ?? error?.message ?? error);
        errors[message] = (errors[message] ?? 0) + 1;
        await sleep(10); // a refused connection must not spin
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, client));
  const seconds = (performance.now() - started) / 1000;
  if (ownAgent) agent.destroy();
  latencies.sort((a, b) => a - b);
  return {
    sent,
    ok,
    failed,
    statuses,
    errors,
    seconds,
    rps: ok / seconds,
    latencies,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
  };
}

/**
 * Closed-loop load on several servers in turn, `rounds` times (A, B, A, B...), after one warm-up each, with
 * every round and the best rounds' CPU per request printed. `sides`: name -> { make, pid }. Other work on the
 * machine only ever slows a round down, so a side's best round (most req/s) is the closest to its real cost.
 * Returns name -> the best round's result: runLoad's plus `cpuMsPerRequest` (the server process's CPU over
 * the round per 2xx answer; PostgreSQL and Redis not included).
 */
export async function alternateLoads(sides, { rounds = 2, concurrency, durationMs, warmupMs }) {
  const results = Object.fromEntries(Object.keys(sides).map((name) => [name, []]));
  for (const { make } of Object.values(sides)) await runLoad({ make, concurrency, durationMs: warmupMs });
  for (let round = 0; round < rounds; round++) {
    for (const [name, { make, pid }] of Object.entries(sides)) {
      const [result, cpu] = await withCpu(pid, () => runLoad({ make, concurrency, durationMs }));
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

/** Nearest-rank percentile of an ascending array (NaN when empty). */
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
