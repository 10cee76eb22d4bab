import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:net';
import pg from 'pg';
import { generateApiKey, hashApiKey, lookupPrefix } from '../../src/common/api-key.js';

const MAIN = new URL('../../dist/main.js', import.meta.url).pathname;
const CLI = new URL('../../dist/cli.js', import.meta.url).pathname;

/** The built service running as a real process, as an operator would start it (`npm test` builds first). */
export interface RunningService {
  baseUrl: string;
  process: ChildProcess;
  /** Everything the process printed so far. */
  output(): string;
  /** Sends the signal and resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

/**
 * `nodeArgs` go before the script, e.g. the heap limit of `npm run start:prod` or `--cpu-prof` (the benches); `main`
 * is another build of the service to run (the benches' before/after comparisons).
 */
export async function startService(
  env: Record<string, string>,
  timeoutMs = 30_000,
  nodeArgs: readonly string[] = [],
  main = MAIN,
): Promise<RunningService> {
  const port = env.PORT ? Number(env.PORT) : await freePort();
  const child = spawn(process.execPath, [...nodeArgs, main], {
    env: { PATH: process.env.PATH, HOST: '127.0.0.1', ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  // 'close', not 'exit': what the process wrote last is in `output` only once its pipes have closed.
  const exited = once(child, 'close').then(([code]) => code as number | null);

  const service: RunningService = {
    baseUrl: `http://127.0.0.1:${port}`,
    process: child,
    output: () => output,
    async stop(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };

  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode} during start:\n${output}`);
    try {
      const response = await fetch(`${service.baseUrl}/health/live`);
      if (response.ok) return service;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await service.stop('SIGKILL');
  throw new Error(`service did not start within ${timeoutMs} ms:\n${output}`);
}

/** Runs the API key command line as an operator would; resolves with its exit code and output. */
export function runCli(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return once(child, 'close').then(([code]) => ({ code: code as number | null, stdout, stderr }));
}

/** A user with a fresh key, written straight to the test database (the CLI has tests of its own). */
export async function createUserWithKey(databaseUrl: string, name = `user-${randomUUID()}`): Promise<string> {
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
    return key;
  } finally {
    await client.end();
  }
}
