import type { TestEnvironment } from '../support/environment.js';
import type { FakeCog } from '../support/fake-cog.js';
import type { RunningService } from '../support/service.js';
import {
  cogEngine,
  createUser,
  expectCompleteWithOutputs,
  final,
  getItem,
  listDir,
  mediaFolder,
  Processes,
  storedInputs,
  submit,
  uniqueImage,
  WorkerWorld,
} from '../support/harness.js';

/** Long enough to kill the worker while the engine is busy with the job. */
const ENGINE_MS = 3000;

describe('a worker killed in the middle of a job', () => {
  let world: WorkerWorld;
  let env: TestEnvironment;
  let processes: Processes;
  let fake: FakeCog;
  let api: RunningService;
  let sut: RunningService;
  let key: string;

  beforeAll(async () => {
    world = await WorkerWorld.create(() => ({ kind: 'succeed', delayMs: ENGINE_MS }), { queue: false });
    ({ env, processes, fake } = world);
    [api, sut] = await Promise.all([
      processes.start('api', cogEngine(fake)),
      processes.start('worker', cogEngine(fake)),
    ]);
    ({ key } = await createUser(env));
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
  }, 60_000);

  it('hands the job to another worker, which completes it exactly once', async () => {
    const clothes = await uniqueImage();
    const id = await submit(api.baseUrl, key, clothes);
    await fake.waitFor((f) => f.requestsFor(clothes).length === 1, 'the first worker to call the engine');

    expect(await sut.stop('SIGKILL')).toBeNull();
    expect(sut.process.signalCode).toBe('SIGKILL');
    await fake.waitFor((f) => f.requestsFor(clothes)[0].aborted, 'the killed worker to drop its connection');
    // The killed worker never wrote a result; the item is still waiting for one.
    const meanwhile = (await (await getItem(api.baseUrl, key, id)).json()) as { status: string };
    expect(meanwhile.status).toBe('pending');

    await processes.start('worker', cogEngine(fake));
    const item = await final(api.baseUrl, key, id);

    await expectCompleteWithOutputs(api.baseUrl, item);
    const calls = fake.requestsFor(clothes);
    expect(calls).toHaveLength(2);
    expect(calls[0]).toMatchObject({ aborted: true, answered: false });
    expect(calls[1]).toMatchObject({ aborted: false, answered: true });
    // One set of outputs, no temporary files left behind; the inputs are gone once the job is done.
    expect(await listDir(mediaFolder(env, id))).toEqual(['preview.webp', 'stock.jpg']);
    expect(await storedInputs(env, id)).toEqual([]);
    // Completed once: later reads give the same completion time.
    const again = await final(api.baseUrl, key, id);
    expect(again.completed_at).toBe(item.completed_at);
    expect(again.updated_at).toBe(item.updated_at);
  }, 60_000);
});
