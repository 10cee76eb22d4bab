import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import type Bull from 'bull';
import type { TestEnvironment } from '../support/environment.js';
import { type FakeCog, type FakeCogAnswer, type FakeCogRequest, sha256 } from '../support/fake-cog.js';
import type { RunningService } from '../support/service.js';
import { REQUEST_ATTEMPTS } from '../../src/engines/index.js';
import {
  cogEngine,
  createUser,
  expectCompleteWithOutputs,
  expectFailedLeavingNothing,
  final,
  jobSettled,
  Processes,
  storedInputPath,
  submit,
  uniqueImage,
  WorkerWorld,
} from '../support/harness.js';
import { type HistoryItemBody } from '../support/client.js';

const ATTEMPTS = 3;
/** Short, so a hanging engine uses up its attempts quickly. */
// Longer than one attempt's own retries of a failing request (remote-http's backoff).
const ENGINE_TIMEOUT_MS = 3000;

describe('engine failures', () => {
  let world: WorkerWorld;
  let env: TestEnvironment;
  let processes: Processes;
  let fake: FakeCog;
  let api: RunningService;
  let worker: RunningService | undefined;
  let queue: Bull.Queue;
  let key: string;
  /** What the fake does for each job, by the sha256 of the job's `clothes` image; unlisted jobs succeed. */
  const plans = new Map<string, (request: FakeCogRequest) => FakeCogAnswer>();

  const workerEnv = (): Record<string, string> => ({
    ...cogEngine(fake),
    JOB_ATTEMPTS: String(ATTEMPTS),
    ENGINE_TIMEOUT_MS: String(ENGINE_TIMEOUT_MS),
    WORKER_CONCURRENCY: '4',
  });

  async function ensureWorker(): Promise<void> {
    worker ??= await processes.start('worker', workerEnv());
  }

  /** Submits a job whose engine calls the fake answers as `plan` says; returns its id and image. */
  async function submitWithPlan(
    plan: (request: FakeCogRequest) => FakeCogAnswer,
  ): Promise<{ id: string; clothes: Buffer }> {
    const clothes = await uniqueImage();
    plans.set(sha256(clothes), plan);
    return { id: await submit(api.baseUrl, key, clothes), clothes };
  }

  /** The final item, once the workers have let go of the job (so no further attempt can come). */
  async function settled(id: string): Promise<HistoryItemBody> {
    const item = await final(api.baseUrl, key, id);
    await jobSettled(queue, id);
    return item;
  }

  /** What a client reads in `error.message` names nothing inside the machine. */
  function expectPlainMessage(item: HistoryItemBody): void {
    const { port, hostname } = new URL(fake.url);
    expect(item.error!.message).not.toContain(hostname);
    expect(item.error!.message).not.toContain(port);
    expect(item.error!.message).not.toMatch(/https?:|predictions|Cog|HTTP \d{3}|\bat /);
  }

  beforeAll(async () => {
    world = await WorkerWorld.create(
      (request) => plans.get(Object.values(request.images)[0])?.(request) ?? { kind: 'succeed' },
    );
    ({ env, processes, fake, queue } = world);
    api = await processes.start('api', cogEngine(fake));
    ({ key } = await createUser(env));
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
  }, 60_000);

  it('fails a job whose stored input no longer decodes at once, as invalid_image', async () => {
    // Only the API runs: the job waits in the queue while its stored input is damaged.
    if (worker) await processes.stop(worker);
    worker = undefined;
    const { id, clothes } = await submitWithPlan(() => ({ kind: 'succeed' }));
    const stored = storedInputPath(env, id, 'clothes');
    expect(sha256(await readFile(stored))).toBe(sha256(clothes));
    await writeFile(stored, randomBytes(4096));

    await ensureWorker();
    const item = await settled(id);

    await expectFailedLeavingNothing(env, api.baseUrl, item, 'invalid_image');
    expectPlainMessage(item);
    expect(fake.requestsFor(clothes)).toHaveLength(0);
  }, 60_000);

  it('retries an engine that answers 500, and completes when it recovers', async () => {
    await ensureWorker();
    const { id, clothes } = await submitWithPlan((request) =>
      request.attempt <= 2 ? { kind: 'http', status: 500 } : { kind: 'succeed' },
    );

    const item = await settled(id);

    await expectCompleteWithOutputs(api.baseUrl, item);
    expect(fake.requestsFor(clothes).map((request) => request.attempt)).toEqual([1, 2, 3]);
  }, 60_000);

  it(`fails as engine_failed after ${ATTEMPTS} attempts when the engine keeps answering 500`, async () => {
    await ensureWorker();
    const { id, clothes } = await submitWithPlan(() => ({ kind: 'http', status: 500 }));

    const item = await settled(id);

    await expectFailedLeavingNothing(env, api.baseUrl, item, 'engine_failed');
    expectPlainMessage(item);
    // Each attempt of the job tried the request itself before giving up.
    expect(fake.requestsFor(clothes)).toHaveLength(ATTEMPTS * REQUEST_ATTEMPTS);
  }, 60_000);

  it('fails at once as engine_failed when the engine rejects the request (422)', async () => {
    await ensureWorker();
    const { id, clothes } = await submitWithPlan(() => ({ kind: 'http', status: 422 }));

    const item = await settled(id);

    await expectFailedLeavingNothing(env, api.baseUrl, item, 'engine_failed');
    expectPlainMessage(item);
    expect(fake.requestsFor(clothes)).toHaveLength(1);
  }, 60_000);

  it(`fails as timeout after ${ATTEMPTS} attempts when the engine never answers`, async () => {
    await ensureWorker();
    const { id, clothes } = await submitWithPlan(() => ({ kind: 'hang' }));

    const item = await settled(id);

    await expectFailedLeavingNothing(env, api.baseUrl, item, 'timeout');
    expectPlainMessage(item);
    const calls = fake.requestsFor(clothes);
    expect(calls).toHaveLength(ATTEMPTS);
    // The worker gave up on every call itself.
    expect(calls.every((request) => request.aborted)).toBe(true);
  }, 60_000);
});
