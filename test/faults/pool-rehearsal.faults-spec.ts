import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type FakeCog, startFakeCog } from '../support/fake-cog.js';
import {
  createUser,
  expectCompleteWithOutputs,
  final,
  submit,
  TOOL,
  uniqueImage,
  WorkerWorld,
} from '../support/harness.js';
import { type RoundRobinProxy, startRoundRobinProxy } from '../support/round-robin-proxy.js';
import type { RunningService } from '../support/service.js';

/** Long enough that a server is killed, and a worker stopped, while jobs run on them. */
const ENGINE_MS = 600;
const answer = () => ({ kind: 'succeed' as const, delayMs: ENGINE_MS });

const portOf = (service: RunningService) => Number(new URL(service.baseUrl).port);

/**
 * Many hosts on one machine: two API processes behind a round-robin balancer, three workers, and a pool of three fake
 * Cog servers (one GPU each, `concurrency: 1`) named by the routing file's `urls`. A model server dies, a fourth is
 * added by a change of the routing file, and a worker is stopped, each while jobs run.
 */
describe('a pool of model servers behind several APIs and workers', () => {
  let world: WorkerWorld;
  let proxy: RoundRobinProxy;
  let key: string;
  let routing: string;
  let workers: RunningService[];
  const fakes: FakeCog[] = [];

  /** The routing file, written whole and renamed into place, as a ConfigMap's update is seen. */
  function route(servers: FakeCog[]): void {
    const body = JSON.stringify({
      engines: { gpu: { kind: 'cog', urls: servers.map((fake) => fake.url), concurrency: 1, timeout: '30s' } },
      routes: { [TOOL]: { engine: 'gpu', inputs: { clothes: 'clothes' } } },
    });
    writeFileSync(`${routing}.next`, body);
    renameSync(`${routing}.next`, routing);
  }

  /** Every prediction of each job, across the servers: the ids a server saw more than once, and the jobs' outcomes. */
  function runs(ids: string[]) {
    const twiceOnOneServer = fakes.flatMap((fake) =>
      fake.requests.map((request) => request.id).filter((id, index, all) => all.indexOf(id) !== index),
    );
    const succeeded = ids.map(
      (id) => fakes.flatMap((fake) => fake.requests).filter((r) => r.id === id && r.status === 'succeeded').length,
    );
    return { twiceOnOneServer, succeeded };
  }

  async function submitMany(count: number): Promise<string[]> {
    const images = await Promise.all(Array.from({ length: count }, () => uniqueImage()));
    return Promise.all(images.map((clothes) => submit(proxy.baseUrl, key, clothes)));
  }

  async function expectAllComplete(ids: string[]): Promise<void> {
    const items = await Promise.all(ids.map((id) => final(proxy.baseUrl, key, id, 60_000)));
    for (const item of items) await expectCompleteWithOutputs(proxy.baseUrl, item);
  }

  beforeAll(async () => {
    world = await WorkerWorld.create(answer);
    fakes.push(world.fake, await startFakeCog(answer), await startFakeCog(answer));
    routing = join(mkdtempSync(join(tmpdir(), 'pool-rehearsal-')), 'engines.yaml');
    route(fakes);
    const settings = { ENGINES_FILE: routing, WORKER_CONCURRENCY: '2', SHUTDOWN_TIMEOUT_MS: '30000' };
    const [first, second, ...started] = await Promise.all([
      world.processes.start('api', settings),
      world.processes.start('api', settings),
      world.processes.start('worker', settings),
      world.processes.start('worker', settings),
      world.processes.start('worker', settings),
    ]);
    workers = started;
    proxy = await startRoundRobinProxy([portOf(first), portOf(second)]);
    ({ key } = await createUser(world.env));
  }, 90_000);

  afterAll(async () => {
    await proxy?.close();
    await Promise.all(fakes.slice(1).map((fake) => fake.close().catch(() => undefined)));
    await world?.dispose();
  }, 60_000);

  it('finishes the jobs of a model server killed mid-run on the others, none lost and none run twice on a server', async () => {
    const ids = await submitMany(12);
    const [killed] = fakes;
    await killed.waitFor((fake) => fake.inFlight().length === 1, 'a job on the first server');

    await killed.close();
    await expectAllComplete(ids);

    const { twiceOnOneServer, succeeded } = runs(ids);
    expect(twiceOnOneServer).toEqual([]);
    expect(succeeded.every((count) => count === 1)).toBe(true);
    // The job the server was running when it died ran again, elsewhere.
    const interrupted = killed.requests.filter((request) => !request.answered).map((r) => r.id);
    expect(interrupted.length).toBeGreaterThan(0);
    for (const id of interrupted)
      expect(fakes.slice(1).some((fake) => fake.requests.some((r) => r.id === id))).toBe(true);
  }, 120_000);

  it('sends jobs to a fourth server added to the routing file while the service runs, within 30 s', async () => {
    const added = await startFakeCog(answer);
    fakes.push(added);
    route(fakes);

    // Jobs keep coming until the new server takes one: the reload is seen by each worker on its own.
    const ids: string[] = [];
    const deadline = Date.now() + 30_000;
    while (added.requests.length === 0) {
      if (Date.now() > deadline) throw new Error('the added server took no job within 30 s');
      ids.push(...(await submitMany(4)));
      await added.waitFor((fake) => fake.requests.length > 0, 'a job on the added server', 3000).catch(() => {});
    }
    await expectAllComplete(ids);

    expect(runs(ids).twiceOnOneServer).toEqual([]);
  }, 120_000);

  it('loses nothing when a worker is stopped (SIGTERM) while it runs jobs on the pool', async () => {
    const ids = await submitMany(12);
    const servers = fakes.slice(1);
    await Promise.all(servers.map((fake) => fake.waitFor((f) => f.inFlight().length === 1, 'every server busy')));

    const code = await world.processes.stop(workers[0], 40_000);
    await expectAllComplete(ids);

    expect(code).toBe(0);
    const { twiceOnOneServer, succeeded } = runs(ids);
    expect(twiceOnOneServer).toEqual([]);
    expect(succeeded.every((count) => count === 1)).toBe(true);
  }, 120_000);
});
