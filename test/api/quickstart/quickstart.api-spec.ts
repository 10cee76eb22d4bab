import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { realpathSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bearer, postJob } from '../../support/client.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { uniqueImage } from '../../support/harness.js';
import { createUserWithKey, freePort } from '../../support/service.js';

/**
 * What a newcomer does first: copy the repository, run the README's own start command, and use the service at once,
 * the way a frontend team does, with bursts of job creations while pages poll.
 */
const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const START_TIMEOUT_MS = 120_000;
const BURSTS = 4;
const BURST_SIZE = 8;
const POLLERS = 20;
const DEMO_KEY_LINE = /export IGS_API_KEY=(igs_[0-9A-Za-z]{40})\b/;

/** The command of the README's "Run it" section, as a newcomer copies it. */
async function readmeStartCommand(): Promise<string> {
  const readme = await readFile(join(ROOT, 'README.md'), 'utf8');
  const section = readme.slice(readme.indexOf('## Run it'));
  const command = /```sh\n([^\n]+)\n```/.exec(section)?.[1];
  if (!command) throw new Error('the README has no start command under "## Run it"');
  return command;
}

/** The repository as a fresh clone has it (the tracked files as they are now), with dependencies installed. */
async function freshCopy(): Promise<string> {
  const folder = await mkdtemp(join(tmpdir(), 'igs-quickstart-'));
  const files = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' }).split('\0').filter(Boolean);
  for (const file of files) {
    await mkdir(dirname(join(folder, file)), { recursive: true });
    await cp(join(ROOT, file), join(folder, file));
  }
  // What `npm install` would download, linked rather than fetched again: the README's own `npm install` still runs.
  const modules = join(folder, 'node_modules');
  // The real folder, in case the checkout's node_modules is a link to one elsewhere (a worktree, say).
  const installed = realpathSync(join(ROOT, 'node_modules'));
  execFileSync('cp', ['-al', installed, modules]);
  // The files npm and tsc rewrite in place would change the checkout's own through the links: the copy gets its own
  // npm record and no caches.
  await rm(join(modules, '.cache'), { recursive: true, force: true });
  // (Unlinked first: copying onto the link would write through it into the checkout's file.)
  await rm(join(modules, '.package-lock.json'), { force: true });
  await cp(join(installed, '.package-lock.json'), join(modules, '.package-lock.json'));
  return folder;
}

interface Started {
  baseUrl: string;
  /** What the command was started with, besides PATH and HOME. */
  env: Record<string, string>;
  output: () => string;
  stop(): Promise<void>;
}

/** Runs the README's command in `folder` with only what a newcomer's machine would differ in. */
async function start(folder: string, command: string, env: Record<string, string>): Promise<Started> {
  const port = await freePort();
  const child: ChildProcess = spawn('sh', ['-c', command], {
    cwd: folder,
    // npm and the service it starts form a process group of their own, stopped together.
    detached: true,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env, PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = once(child, 'close');
  const started: Started = {
    baseUrl: `http://127.0.0.1:${port}`,
    env,
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, 'SIGTERM');
      await exited;
    },
  };
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (!output.includes('Serving role')) {
    if (child.exitCode !== null) throw new Error(`"${command}" exited with ${child.exitCode}:\n${output}`);
    if (Date.now() > deadline) {
      await started.stop();
      throw new Error(`"${command}" did not serve within ${START_TIMEOUT_MS} ms:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return started;
}

/** Runs a shell command in `folder` as a newcomer would, beside the started service; resolves its exit and output. */
async function runIn(
  folder: string,
  command: string,
  env: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn('sh', ['-c', command], {
    cwd: folder,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr };
}

interface Tally {
  creations: Record<number, number>;
  polls: Record<number, number>;
  accepted: string[];
  serverErrors: string[];
}

/**
 * Bursts of concurrent job creations (real uploads) while clients poll their items and the history list, then waits
 * for every accepted job to end.
 */
async function useAsAFrontendWould(
  baseUrl: string,
  key: string,
): Promise<{ tally: Tally; final: Record<string, number> }> {
  // Raw polls: every answer is tallied as a frontend sees it, whatever its status.
  const headers = bearer(key);
  const tally: Tally = { creations: {}, polls: {}, accepted: [], serverErrors: [] };
  const count = (counts: Record<number, number>, status: number) => (counts[status] = (counts[status] ?? 0) + 1);
  const create = async () => {
    const clothes = { data: await uniqueImage(), filename: 'clothes.png', contentType: 'image/png' };
    const response = await postJob(baseUrl, key, { tool: 'fashion_card', clothes });
    const text = await response.text();
    count(tally.creations, response.status);
    if (response.status === 202) tally.accepted.push((JSON.parse(text) as { history_item_id: string }).history_item_id);
    if (response.status >= 500) tally.serverErrors.push(`POST ${response.status}: ${text}`);
  };
  let polling = true;
  const poll = async (index: number) => {
    while (polling) {
      const ids = tally.accepted;
      const path =
        index % 2 === 0 || ids.length === 0
          ? '/user/generation-history?limit=10'
          : `/user/generation-history/${ids[index % ids.length]}`;
      const response = await fetch(`${baseUrl}${path}`, { headers });
      const text = await response.text();
      count(tally.polls, response.status);
      if (response.status >= 500) tally.serverErrors.push(`GET ${path} ${response.status}: ${text}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };
  const pollers = Array.from({ length: POLLERS }, (_, index) => poll(index));
  for (let burst = 0; burst < BURSTS; burst++) {
    await Promise.all(Array.from({ length: BURST_SIZE }, create));
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  polling = false;
  await Promise.all(pollers);

  const final: Record<string, number> = {};
  for (const id of tally.accepted) {
    const response = await fetch(`${baseUrl}/user/generation-history/${id}`, {
      headers: { ...headers, Prefer: 'wait=60' },
    });
    const { status } = (await response.json()) as { status: string };
    final[status] = (final[status] ?? 0) + 1;
  }
  return { tally, final };
}

/** Every creation 202 or 429 (the per-user limits), every poll 200, no 5xx, and every accepted job complete. */
function expectHeldUp({ tally, final }: { tally: Tally; final: Record<string, number> }): void {
  expect(tally.serverErrors).toEqual([]);
  expect(Object.keys(tally.creations).filter((status) => status !== '202' && status !== '429')).toEqual([]);
  expect(tally.creations[202]).toBeGreaterThanOrEqual(BURST_SIZE);
  expect(Object.keys(tally.polls)).toEqual(['200']);
  expect(final).toEqual({ complete: tally.accepted.length });
}

describe("the README's quick start, on a fresh copy of the repository", () => {
  let folder: string;
  let command: string;
  let env: TestEnvironment;

  beforeAll(async () => {
    command = await readmeStartCommand();
    folder = await freshCopy();
    env = await createTestEnvironment();
  }, 60_000);

  afterAll(async () => {
    await rm(folder, { recursive: true, force: true });
    await env?.dispose();
  }, 60_000);

  it(
    'starts with no DATABASE_URL, prints a demo key, and holds bursts of creations while clients poll',
    async () => {
      // Only the ports and a Redis namespace of its own differ from a newcomer's machine.
      const service = await start(folder, command, {
        EMBEDDED_DB_PORT: String(await freePort()),
        REDIS_PREFIX: env.redisPrefix,
      });
      try {
        const key = DEMO_KEY_LINE.exec(service.output())?.[1];
        expect(key).toBeDefined();

        expectHeldUp(await useAsAFrontendWould(service.baseUrl, key!));
        // The operators' command beside it, as the docs give it for a checkout, on the same embedded database. npm runs
        // the package's bin as a file, and makes it executable itself only in some states of its install ("igs:
        // Permission denied" on a fresh clone): the build does.
        expect((await stat(join(folder, 'dist/cli.js'))).mode & 0o111).toBe(0o111);
        const igs = await runIn(folder, 'npx igs users list', service.env);
        expect(igs).toMatchObject({ code: 0, stdout: expect.stringMatching(/^demo\t/m) });
      } finally {
        await service.stop();
      }
    },
    4 * 60_000,
  );

  it(
    'holds the same bursts on a real PostgreSQL (DATABASE_URL set)',
    async () => {
      const service = await start(folder, command, {
        DATABASE_URL: env.databaseUrl,
        // The README's word for a start on PostgreSQL: every process signs result URLs with the same key.
        MEDIA_SIGNING_KEY: env.serviceEnv.MEDIA_SIGNING_KEY,
        REDIS_PREFIX: env.redisPrefix,
      });
      try {
        const key = await createUserWithKey(env.databaseUrl);

        expectHeldUp(await useAsAFrontendWould(service.baseUrl, key));
      } finally {
        await service.stop();
      }
    },
    4 * 60_000,
  );
});
