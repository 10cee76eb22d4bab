import type { TestEnvironment } from '../support/environment.js';
import { type FakeCog, sha256 } from '../support/fake-cog.js';
import {
  cogEngine,
  createUser,
  expectCompleteWithOutputs,
  final,
  getItem,
  Processes,
  submit,
  TOOL,
  uniqueImage,
  waitUntil,
  WorkerWorld,
} from '../support/harness.js';
import type { RunningService } from '../support/service.js';
import {
  type Answer,
  expectUnavailableProblem,
  millisSince,
  percentile,
  report,
  tally,
  timed,
} from '../support/observe.js';
import { type PrivateServer, startPrivatePostgres } from '../support/private-servers.js';
import { bearer, Client, postJob } from '../support/client.js';

const CLIENTS = 3;
const PAUSE_MS = 100;

describe('PostgreSQL restarted under a running service', () => {
  let postgres: PrivateServer & { initdbMs: number };
  let world: WorkerWorld;
  let env: TestEnvironment;
  let processes: Processes;
  let fake: FakeCog;
  let api: RunningService;
  let worker: RunningService;
  let key: string;
  /** Jobs held in the engine until the database has gone away: they finish during the outage. */
  const held = new Set<string>();
  let endHold!: () => void;
  const outageBegun = new Promise<void>((resolve) => (endHold = resolve));

  beforeAll(async () => {
    postgres = await startPrivatePostgres();
    world = await WorkerWorld.create(
      (request) => ({
        kind: 'succeed',
        delayMs: 50,
        until: held.has(Object.values(request.images)[0]) ? outageBegun : undefined,
      }),
      // Both held jobs run on the model at once.
      { queue: false, servers: { adminDatabaseUrl: postgres.url }, concurrency: 2 },
    );
    ({ env, processes, fake } = world);
    const settings = { ...cogEngine(fake), LIMIT_MAX_PENDING: '1000', LIMIT_CREATIONS_PER_MINUTE: '1000' };
    [api, worker] = await Promise.all([processes.start('api', settings), processes.start('worker', settings)]);
    ({ key } = await createUser(env));
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
    await postgres?.dispose();
  }, 60_000);

  it('answers 503 problem+json in time while it is down, and recovers without a restart', async () => {
    const before = await submit(api.baseUrl, key, await uniqueImage());
    await expectCompleteWithOutputs(api.baseUrl, await final(api.baseUrl, key, before));
    const inFlightImages = await Promise.all([uniqueImage(), uniqueImage()]);
    for (const clothes of inFlightImages) held.add(sha256(clothes));
    const inFlight = await Promise.all(inFlightImages.map((clothes) => submit(api.baseUrl, key, clothes)));
    await fake.waitFor((f) => f.inFlight().length === inFlightImages.length, 'both held jobs to be in the engine');

    const started = performance.now();
    await postgres.stop();
    const downAt = millisSince(started);
    endHold();
    const answers: Answer[] = [];
    // Raw requests: every answer is recorded as it came, whatever it is.
    const requests: [string, () => Promise<Response>][] = [
      ['GET item', () => fetch(`${api.baseUrl}/user/generation-history/${before}`, { headers: bearer(key) })],
      ['GET list', () => fetch(`${api.baseUrl}/user/generation-history?limit=5`, { headers: bearer(key) })],
      [
        'POST job',
        async () =>
          postJob(api.baseUrl, key, {
            tool: TOOL,
            clothes: { data: await uniqueImage(), filename: 'c.png', contentType: 'image/png' },
          }),
      ],
      [
        'PATCH feedback',
        () =>
          fetch(`${api.baseUrl}/user/generation-history/feedback/${before}`, {
            method: 'PATCH',
            headers: { ...bearer(key), 'Content-Type': 'application/json' },
            body: '{"like":true}',
          }),
      ],
      ['GET ready', () => fetch(`${api.baseUrl}/health/ready`)],
      ['GET live', () => fetch(`${api.baseUrl}/health/live`)],
    ];
    let stop = false;
    const client = async (offset: number) => {
      for (let i = offset; !stop; i++) {
        const [what, send] = requests[i % requests.length];
        answers.push(await timed(what, started, send));
        await new Promise((resolve) => setTimeout(resolve, PAUSE_MS));
      }
    };
    const clients = Array.from({ length: CLIENTS }, (_, index) => client(index * 2));
    // Down until each kind of request was answered as many times as there are clients (a request that hangs holds
    // its client, and the wait fails), and the held jobs' model runs have finished.
    await waitUntil(
      () => requests.every(([what]) => answers.filter((a) => a.what === what).length >= CLIENTS),
      `each kind of request to be answered ${CLIENTS} times while the database is down`,
    );
    await fake.waitFor(
      (f) => inFlightImages.every((clothes) => f.requestsFor(clothes)[0].answered),
      'the engine to answer the held jobs during the outage',
    );
    stop = true;
    await Promise.all(clients);
    const upStartedAt = millisSince(started);
    await postgres.start();
    const upAt = millisSince(started);

    // Recovered without a restart: reads, then a new job end to end, on the same processes.
    await waitUntil(async () => (await getItem(api.baseUrl, key, before)).status === 200, 'reads to work again');
    const readsBackAt = millisSince(started);
    const after = await submit(api.baseUrl, key, await uniqueImage());
    const afterItem = await final(api.baseUrl, key, after);
    const jobDoneAt = millisSince(started);
    // The jobs that were in the engine could not record their result while the database was down; the reconciler
    // runs them again once they are older than its 10 s grace (src/worker/reconciler.ts).
    const inFlightItems = await Promise.all(inFlight.map((id) => final(api.baseUrl, key, id)));
    const inFlightDoneAt = millisSince(started);
    const list = await new Client(api.baseUrl, key).list('limit=100');

    const apiAnswers = answers.filter((a) => a.what !== 'GET live' && a.what !== 'GET ready');
    const answerMs = answers.map((a) => a.ms);
    report('PostgreSQL restart', {
      'initdb (ms)': postgres.initdbMs,
      'down at / restart began at / back at (ms)': `${downAt} / ${upStartedAt} / ${upAt}`,
      answers: tally(answers),
      'answer ms p50 / p99 / max': [percentile(answerMs, 50), percentile(answerMs, 99), Math.max(...answerMs)],
      'reads answered again at (ms)': readsBackAt,
      'new job complete at (ms)': jobDoneAt,
      'jobs in the engine at the outage ended as': inFlightItems.map((item) => item.error?.code ?? item.status),
      'and were final at (ms)': inFlightDoneAt,
      'API / worker still the same process': `${api.process.exitCode === null} / ${worker.process.exitCode === null}`,
    });

    expect(answers.filter((a) => a.status === 500 || a.status === 0)).toEqual([]);
    for (const answer of apiAnswers) expectUnavailableProblem(answer);
    for (const answer of answers.filter((a) => a.what === 'GET ready')) expect(answer.status).toBe(503);
    for (const answer of answers.filter((a) => a.what === 'GET live')) expect(answer.status).toBe(200);

    await expectCompleteWithOutputs(api.baseUrl, afterItem);
    for (const item of inFlightItems) await expectCompleteWithOutputs(api.baseUrl, item);
    expect(list.status).toBe(200);
    expect(list.body.total).toBe(2 + inFlight.length);
    expect((await fetch(`${api.baseUrl}/health/ready`)).status).toBe(200);
    expect(api.process.exitCode).toBeNull();
    expect(worker.process.exitCode).toBeNull();
    expect(api.output()).not.toMatch(/"level":60/);
  }, 120_000);
});
