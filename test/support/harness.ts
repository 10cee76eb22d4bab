import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Bull from 'bull';
import pg from 'pg';
import sharp from 'sharp';
import { inputKey } from '../../src/media/media.js';
import { GENERATION_QUEUE } from '../../src/queue/queues.js';
import { createTestEnvironment, type EnvironmentServers, type TestEnvironment } from './environment.js';
import { type FakeCog, type FakeCogBehaviour, startFakeCog } from './fake-cog.js';
import { makeImage } from './jobs.js';
import { signedMediaPath, signedPathOf } from './media.js';
import { createUserWithKey, type RunningService, startService } from './service.js';
import { type Answer, Client, createJob, type HistoryItemBody, type ItemOrProblem, waitForFinal } from './client.js';

/**
 * Short locks, checks and sweeps so that recovery paths (stalled jobs, retries, the reconciler) run within a
 * few seconds instead of the production defaults' minutes; and room for the dozens of jobs a test's one user uploads
 * and waits for at once (the fair share itself is test/api/jobs/fair-share.api-spec.ts's).
 */
export const FAST_TIMINGS: Record<string, string> = {
  JOB_LOCK_MS: '2000',
  JOB_STALLED_CHECK_MS: '1000',
  RECONCILE_INTERVAL_MS: '500',
  JOB_BACKOFF_MS: '100',
  SHUTDOWN_TIMEOUT_MS: '3000',
  LIMIT_MAX_PENDING: '100',
  LIMIT_CONCURRENT_UPLOADS: '100',
  LIMIT_HELD_REQUESTS: '100',
};

/** The tool every test here runs: one `clothes` image, sent to the fake Cog server. */
export const TOOL = 'fashion_card';

/**
 * Sends the test tool's jobs to the fake Cog server: by the `ENGINE_FASHION_CARD=cog:<url>` shortcut (one prediction at
 * a time), or, for a fake that runs several at once, by a routing file that says so.
 */
export function cogEngine(fake: FakeCog, options: { timeoutMs?: number } = {}): Record<string, string> {
  if (fake.concurrency === 1) return { ENGINE_FASHION_CARD: `cog:${fake.url}` };
  const file = join(mkdtempSync(join(tmpdir(), 'fake-cog-')), 'engines.yaml');
  // The shortcut's timeout is ENGINE_TIMEOUT_MS; a routing file's engine has its own (5 minutes unless set).
  const timeout = options.timeoutMs === undefined ? {} : { timeout: `${options.timeoutMs}ms` };
  const routing = {
    engines: { fake: { kind: 'cog', url: fake.url, concurrency: fake.concurrency, ...timeout } },
    routes: { [TOOL]: { engine: 'fake', inputs: { clothes: 'clothes' } } },
  };
  // JSON is YAML.
  writeFileSync(file, JSON.stringify(routing));
  return { ENGINES_FILE: file };
}

/**
 * The fake Cog as the test tool's engine, `workerConcurrency` jobs at once in each worker, and creation limits far
 * above what a test's stream of jobs sends: the stream alone must never be refused.
 */
export function streamSettings(fake: FakeCog, workerConcurrency: number): Record<string, string> {
  return {
    ...cogEngine(fake),
    WORKER_CONCURRENCY: String(workerConcurrency),
    LIMIT_MAX_PENDING: '1000',
    LIMIT_CREATIONS_PER_MINUTE: '1000',
  };
}

/** Starts and, at the end, stops the service processes of one test file. */
export class Processes {
  private readonly running = new Set<RunningService>();

  constructor(private readonly env: TestEnvironment) {}

  start(role: 'api' | 'worker' | 'all', extra: Record<string, string> = {}): Promise<RunningService> {
    return this.track(startService({ ...this.env.serviceEnv, ...FAST_TIMINGS, ROLE: role, ...extra }));
  }

  private async track(started: Promise<RunningService>): Promise<RunningService> {
    const service = await started;
    this.running.add(service);
    void service.process.once('exit', () => this.running.delete(service));
    return service;
  }

  /** SIGTERM, then SIGKILL if the process is still there after `graceMs`; resolves with the exit code. */
  async stop(service: RunningService, graceMs = 15_000): Promise<number | null> {
    const killer = setTimeout(() => void service.stop('SIGKILL'), graceMs);
    try {
      return await service.stop('SIGTERM');
    } finally {
      clearTimeout(killer);
      this.running.delete(service);
    }
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.running].map((service) => this.stop(service)));
  }
}

export interface WorkerWorldOptions {
  /** Open the service's Bull queue as well (default `true`). */
  queue?: boolean;
  /** Servers to build the environment on instead of the shared ones. */
  servers?: EnvironmentServers;
  /** Predictions the fake Cog server runs at once (default 1, as Cog; above 1 the tool is routed by a routing file). */
  concurrency?: number;
}

/**
 * What a worker test file sets up in `beforeAll` and tears down in `afterAll`: its environment, its service
 * processes (none started yet), a fake Cog server answering as `answer` says, and (unless `queue: false`) the
 * service's queue.
 */
export class WorkerWorld {
  private constructor(
    readonly env: TestEnvironment,
    readonly processes: Processes,
    readonly fake: FakeCog,
    private readonly openedQueue: Bull.Queue<{ historyItemId: string }> | undefined,
  ) {}

  static async create(answer?: FakeCogBehaviour, options: WorkerWorldOptions = {}): Promise<WorkerWorld> {
    const env = await createTestEnvironment(options.servers);
    let fake: FakeCog;
    try {
      fake = await startFakeCog(answer, { concurrency: options.concurrency });
    } catch (error) {
      await env.dispose();
      throw error;
    }
    const queue = options.queue === false ? undefined : openQueue(env);
    return new WorkerWorld(env, new Processes(env), fake, queue);
  }

  get queue(): Bull.Queue<{ historyItemId: string }> {
    if (!this.openedQueue) throw new Error('this WorkerWorld was created with queue: false');
    return this.openedQueue;
  }

  /** Closes the queue, stops every process still running, closes the fake and disposes of the environment. */
  async dispose(): Promise<void> {
    await this.openedQueue?.close();
    await this.processes.stopAll();
    await this.fake.close();
    await this.env.dispose();
  }
}

/** The settings of the processes a `worldForBlock` starts before its block's own hooks run. */
export interface BlockServices {
  /** The API's settings (default: the fake Cog as the test tool's engine). */
  api?: Record<string, string>;
  /** One worker is started beside the API for each entry, with its settings (default: none). */
  workers?: Record<string, string>[];
}

export interface BlockWorldOptions extends WorkerWorldOptions {
  /** The processes to start, given the world's fake Cog server. */
  services?: (fake: FakeCog) => BlockServices | Promise<BlockServices>;
  /** For the `beforeAll` that creates the world and starts its processes (default 60 s). */
  timeoutMs?: number;
}

interface BlockProcesses {
  api: RunningService;
  workers: RunningService[];
  user: { key: string; userId: string };
}

/**
 * The WorkerWorld of one `describe` block, made by `worldForBlock`, with its API, the workers started beside it and a
 * user. Its parts exist once the block's `beforeAll` hooks have begun; reading one earlier throws.
 */
export class BlockWorld {
  private current?: WorkerWorld;
  private running?: BlockProcesses;

  private get world(): WorkerWorld {
    if (!this.current) throw new Error('the WorkerWorld of this block is read before its beforeAll created it');
    return this.current;
  }

  get env(): TestEnvironment {
    return this.world.env;
  }

  get processes(): Processes {
    return this.world.processes;
  }

  get fake(): FakeCog {
    return this.world.fake;
  }

  get queue(): Bull.Queue<{ historyItemId: string }> {
    return this.world.queue;
  }

  get api(): RunningService {
    return this.started.api;
  }

  get workers(): RunningService[] {
    return this.started.workers;
  }

  get key(): string {
    return this.started.user.key;
  }

  get userId(): string {
    return this.started.user.userId;
  }

  private get started(): BlockProcesses {
    if (!this.running) throw new Error('the processes of this block are read before its beforeAll started them');
    return this.running;
  }

  async setUp(answer: FakeCogBehaviour | undefined, options: BlockWorldOptions): Promise<void> {
    this.current = await WorkerWorld.create(answer, options);
    const fake = this.current.fake;
    const services = (await options.services?.(fake)) ?? {};
    const processes = this.current.processes;
    const [api, ...workers] = await Promise.all([
      processes.start('api', services.api ?? cogEngine(fake)),
      ...(services.workers ?? []).map((settings) => processes.start('worker', settings)),
    ]);
    // After the API has started: it creates the schema the user is written to.
    const user = await createUser(this.current.env);
    this.running = { api, workers, user };
  }

  async tearDown(): Promise<void> {
    await this.current?.dispose();
  }
}

/**
 * Sets up a WorkerWorld for the enclosing `describe` block: a `beforeAll`, registered before the block's own, creates
 * it, starts its processes and a user; an `afterAll` disposes of it.
 */
export function worldForBlock(answer?: FakeCogBehaviour, options: BlockWorldOptions = {}): BlockWorld {
  const block = new BlockWorld();
  beforeAll(() => block.setUp(answer, options), options.timeoutMs ?? 60_000);
  afterAll(() => block.tearDown(), 60_000);
  return block;
}

/** A user of the service with its own key; `userId` is read back from the database. */
export async function createUser(env: TestEnvironment): Promise<{ key: string; userId: string }> {
  const name = `worker-test-${randomUUID()}`;
  const key = await createUserWithKey(env.databaseUrl, name);
  const [{ id }] = await query<{ id: string }>(env, 'SELECT id FROM users WHERE name = $1', [name]);
  return { key, userId: id };
}

export async function query<T = Record<string, unknown>>(
  env: TestEnvironment,
  sql: string,
  params: unknown[] = [],
): Promise<T[]> {
  const client = new pg.Client({ connectionString: env.databaseUrl });
  await client.connect();
  try {
    return (await client.query(sql, params)).rows as T[];
  } finally {
    await client.end();
  }
}

/**
 * Makes the next `count` completions of any item fail inside PostgreSQL, as a database blip would: the update that marks
 * an item `complete` raises, and its transaction rolls back. Resolves a function that takes the fault away.
 */
export async function failNextCompletions(env: TestEnvironment, count = 1): Promise<() => Promise<void>> {
  // A sequence counts outside transactions: the rolled-back completions are counted too.
  await query(env, 'CREATE SEQUENCE test_completion_failures');
  await query(
    env,
    `CREATE FUNCTION test_fail_completion() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       IF NEW.status = 'complete' AND OLD.status <> 'complete' AND nextval('test_completion_failures') <= ${count} THEN
         RAISE EXCEPTION 'the test failed this completion on purpose';
       END IF;
       RETURN NEW;
     END $$`,
  );
  await query(
    env,
    'CREATE TRIGGER test_fail_completion BEFORE UPDATE ON history_items FOR EACH ROW EXECUTE FUNCTION test_fail_completion()',
  );
  return async () => {
    await query(env, 'DROP TRIGGER test_fail_completion ON history_items');
    await query(env, 'DROP FUNCTION test_fail_completion()');
    await query(env, 'DROP SEQUENCE test_completion_failures');
  };
}

/** How many completions were tried since `failNextCompletions`: those it failed, and those that went through after. */
export async function completionsTried(env: TestEnvironment): Promise<number> {
  const [{ last_value: last, is_called: called }] = await query<{ last_value: string; is_called: boolean }>(
    env,
    'SELECT last_value, is_called FROM test_completion_failures',
  );
  return called ? Number(last) : 0;
}

/** The service's Bull queue, seen from outside as another producer would see it. */
export function openQueue(env: TestEnvironment): Bull.Queue<{ historyItemId: string }> {
  return new Bull(GENERATION_QUEUE, env.redisUrl, { prefix: `${env.redisPrefix}:bull` });
}

let imageCounter = 0;

/** A valid `clothes` image whose bytes no other job in the run shares, so the fake can tell jobs apart. */
export async function uniqueImage(): Promise<Buffer> {
  imageCounter++;
  const colour = `#${(((imageCounter * 2246822519) >>> 8) & 0xffffff).toString(16).padStart(6, '0')}`;
  return makeImage(320, 400, 'png', colour);
}

/** POSTs a job of the test tool and returns the accepted item's id. */
export function submit(baseUrl: string, key: string, clothes: Buffer): Promise<string> {
  return createJob(baseUrl, key, {
    tool: TOOL,
    clothes: { data: clothes, filename: 'clothes.png', contentType: 'image/png' },
  });
}

export function getItem(baseUrl: string, key: string, id: string): Promise<Answer<ItemOrProblem>> {
  return new Client(baseUrl, key).get(id);
}

export async function waitUntil(
  check: () => Promise<boolean> | boolean,
  what: string,
  timeoutMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`still waiting for ${what} after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export function final(baseUrl: string, key: string, id: string, timeoutMs = 30_000): Promise<HistoryItemBody> {
  return waitForFinal(baseUrl, key, id, timeoutMs);
}

export async function pathExists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

export async function listDir(path: string): Promise<string[]> {
  try {
    return (await readdir(path)).sort();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
}

/** Where the local input store keeps the input `name` of an item. */
export function storedInputPath(env: TestEnvironment, id: string, name: string): string {
  return join(env.serviceEnv.INPUT_ROOT, inputKey(id, name));
}

/** The files the local input store holds for an item (by name); none once its job is over or it is deleted. */
export async function storedInputs(env: TestEnvironment, id: string): Promise<string[]> {
  return (await listDir(env.serviceEnv.INPUT_ROOT)).filter((name) => name.startsWith(inputKey(id, '')));
}

export function mediaFolder(env: TestEnvironment, id: string): string {
  return join(env.serviceEnv.MEDIA_ROOT, id);
}

export interface Outputs {
  stock: Buffer;
  preview: Buffer;
}

/**
 * A complete item as the contract promises it: signed relative media paths, the absolute output URL, a completion time,
 * and two files that decode as what their names say (the preview at most 512 px on its long side).
 */
export async function expectCompleteWithOutputs(baseUrl: string, item: HistoryItemBody): Promise<Outputs> {
  const id = item.history_item_id;
  expect(item).toMatchObject({
    status: 'complete',
    error: null,
    preview_url: expect.stringMatching(signedPathOf(id, 'preview.webp')),
    stock_url: expect.stringMatching(signedPathOf(id, 'stock.jpg')),
    output_url: expect.stringMatching(new RegExp(`/${signedPathOf(id, 'stock.jpg').source.slice(1)}`)),
    completed_at: expect.any(String),
  });
  expect(item.output_url!.endsWith(`/${item.stock_url}`)).toBe(true);
  const files = await Promise.all(
    [item.stock_url!, item.preview_url!].map(async (path) => {
      const response = await fetch(new URL(path, `${baseUrl}/`));
      expect(response.status).toBe(200);
      return { type: response.headers.get('content-type'), data: Buffer.from(await response.arrayBuffer()) };
    }),
  );
  const [stock, preview] = files;
  expect(stock.type).toMatch(/^image\/jpeg/);
  expect(preview.type).toMatch(/^image\/webp/);
  const stockInfo = await sharp(stock.data).metadata();
  const previewInfo = await sharp(preview.data).metadata();
  expect(stockInfo.format).toBe('jpeg');
  expect(previewInfo.format).toBe('webp');
  expect(Math.max(previewInfo.width, previewInfo.height)).toBeLessThanOrEqual(512);
  // Decodes in full, not only the header.
  await sharp(stock.data).raw().toBuffer();
  await sharp(preview.data).raw().toBuffer();
  return { stock: stock.data, preview: preview.data };
}

/**
 * A failed item leaves nothing: no output paths, media paths answering 404, no stored inputs, no media folder. It
 * says when it failed (`completed_at` is the time of the final status, `complete` or `error`, in the contract).
 */
export async function expectFailedLeavingNothing(
  env: TestEnvironment,
  baseUrl: string,
  item: HistoryItemBody,
  code: string,
): Promise<void> {
  const id = item.history_item_id;
  expect(item).toMatchObject({
    status: 'error',
    error: { code, message: expect.any(String) },
    preview_url: null,
    stock_url: null,
    output_url: null,
    completed_at: expect.any(String),
  });
  await expectNoMedia(env, baseUrl, id);
  expect(await storedInputs(env, id)).toEqual([]);
}

export async function expectNoMedia(env: TestEnvironment, baseUrl: string, id: string): Promise<void> {
  for (const file of ['preview.webp', 'stock.jpg'] as const) {
    const response = await fetch(`${baseUrl}/${signedMediaPath(env.serviceEnv, id, file)}`);
    expect(response.status).toBe(404);
    await response.body?.cancel();
  }
  expect(await pathExists(mediaFolder(env, id))).toBe(false);
}

/** The workers are done with the job: Bull holds it as completed or failed (or no longer at all). */
export async function jobSettled(queue: Bull.Queue, jobId: string): Promise<void> {
  await waitUntil(async () => {
    const job = await queue.getJob(jobId);
    if (!job) return true;
    const state = await job.getState();
    return state === 'completed' || state === 'failed';
  }, `job ${jobId} to leave the queue's active, waiting and delayed lists`);
}
