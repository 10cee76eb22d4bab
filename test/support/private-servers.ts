import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readdirSync } from 'node:fs';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import pg from 'pg';
import { freePort } from './service.js';

const run = promisify(execFile);

/**
 * Redis and PostgreSQL servers that one test owns, so it can take them down and bring them back without touching
 * the shared ones on 6379 and 5432 that every other test and engineer uses.
 */
export interface PrivateServer {
  /** Connection URL; the same across restarts (same port). */
  url: string;
  /** Down until `start`: connections are refused, open ones are dropped. */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stops the server for good and removes everything it wrote. */
  dispose(): Promise<void>;
}

async function poll(check: () => Promise<boolean>, what: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`${what} did not come up within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * `redis-server` as a child process without persistence: a restart comes back empty, as a Redis without AOF or
 * snapshots does, so every queued job is gone and only the reconciler can bring it back. `stop` kills it (SIGKILL).
 */
export async function startPrivateRedis(): Promise<PrivateServer> {
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;
  let output = '';

  const server: PrivateServer = {
    url,
    async start() {
      if (child) return;
      const started = spawn(
        'redis-server',
        ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      started.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
      started.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child = started;
      try {
        await poll(
          async () => {
            if (started.exitCode !== null) throw new Error(`redis-server exited with ${started.exitCode}:\n${output}`);
            const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
            probe.on('error', () => {});
            try {
              await probe.connect();
              return (await probe.ping()) === 'PONG';
            } finally {
              probe.disconnect();
            }
          },
          `redis-server on port ${port}`,
          10_000,
        );
      } catch (error) {
        await server.stop();
        throw error;
      }
    },
    async stop() {
      const running = child;
      child = undefined;
      if (!running || running.exitCode !== null || running.signalCode !== null) return;
      const exited = once(running, 'exit');
      running.kill('SIGKILL');
      await exited;
    },
    dispose: () => server.stop(),
  };
  await server.start();
  return server;
}

/** The newest installed PostgreSQL's binaries (Debian layout), or PG_BIN. */
function postgresBin(): string {
  if (process.env.PG_BIN) return process.env.PG_BIN;
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((version) => existsSync(join(root, version, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) throw new Error(`no PostgreSQL binaries under ${root}; set PG_BIN`);
  return join(root, versions[0], 'bin');
}

/**
 * A throwaway PostgreSQL cluster on a free loopback port (trust auth, user `postgres`, no fsync: nothing in it
 * needs to survive a power cut), in a temporary directory. PostgreSQL refuses to run as root, so under root its
 * programs run as the `postgres` OS user, who owns the directory. `stop` is a fast shutdown (sessions are ended
 * with 57P01, as on a restart); `pg_ctl` puts the server in the background, and `dispose` stops it and removes
 * the directory.
 */
export async function startPrivatePostgres(): Promise<PrivateServer & { initdbMs: number }> {
  const bin = postgresBin();
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'igs-faults-pg-'));
  const dataDir = join(dir, 'data');
  const asRoot = userInfo().uid === 0;
  if (asRoot) {
    const { stdout } = await run('id', ['-u', 'postgres']);
    const { stdout: gid } = await run('id', ['-g', 'postgres']);
    await chown(dir, Number(stdout.trim()), Number(gid.trim()));
  }
  const pgProgram = (program: string, args: string[]) =>
    asRoot ? run('runuser', ['-u', 'postgres', '--', join(bin, program), ...args]) : run(join(bin, program), args);
  const pgCtl = (args: string[]) => pgProgram('pg_ctl', ['-D', dataDir, ...args]);

  const initStarted = performance.now();
  await pgProgram('initdb', ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--no-sync']);
  const initdbMs = Math.round(performance.now() - initStarted);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  let running = false;

  const server = {
    url,
    initdbMs,
    async start() {
      // Set first, so that a start that fails half way is still stopped by `dispose`.
      running = true;
      await pgCtl([
        '-l',
        join(dir, 'postgres.log'),
        '-o',
        `-c listen_addresses=127.0.0.1 -p ${port} -k ${dir} -c fsync=off -c full_page_writes=off`,
        '-w',
        '-t',
        '30',
        'start',
      ]);
      await poll(
        async () => {
          const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
          client.on('error', () => {});
          try {
            await client.connect();
            await client.query('SELECT 1');
            return true;
          } finally {
            await client.end().catch(() => {});
          }
        },
        `PostgreSQL on port ${port}`,
        30_000,
      );
    },
    async stop() {
      if (!running) return;
      running = false;
      await pgCtl(['-m', 'fast', '-w', '-t', '30', 'stop']);
    },
    async dispose() {
      try {
        if (running) {
          running = false;
          await pgCtl(['-m', 'immediate', '-w', '-t', '30', 'stop']).catch(() => {});
        }
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
  };
  try {
    await server.start();
  } catch (error) {
    await server.dispose().catch(() => {});
    throw error;
  }
  return server;
}
