import { once } from 'node:events';
import { createServer } from 'node:net';
import { randomUUID } from 'node:crypto';
import sharp from 'sharp';
import type { AppConfig } from '../../src/config/config.js';
import type { CogRoute, CogServerSetting } from '../../src/config/engine-settings.js';
import {
  CogServer,
  ServerPool,
  TransientEngineError,
  WorkerShutdown,
  type Resolve,
  type RunRecord,
} from '../../src/engines/index.js';
import { EngineSlotQueue } from '../../src/jobs/engine-slot-queue.js';
import { FAIL_FAST_OPTIONS, ServiceRedis } from '../../src/redis/redis.js';
import { EngineSlots } from '../../src/worker/engine-slots.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { type FakeCog, type FakeCogAnswer, startFakeCog } from '../support/fake-cog.js';
import { memoryRuns } from '../support/run-record.js';

const LIMITS = { maxOutputBytes: 1024 * 1024, maxOutputPixels: 4096 * 4096, minOutputSide: 64 };

const ROUTE: CogRoute = {
  key: 'default',
  tool: 'default',
  generationType: undefined,
  engine: 'vton',
  describe: {},
  kind: 'cog',
  inputs: { image: 'image' },
  params: {},
  passGenerationType: false,
};

/** A port free on every loopback address, for fakes that one DNS name's addresses stand for. */
async function freePort(): Promise<number> {
  const probe = createServer().listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const { port } = probe.address() as { port: number };
  probe.close();
  await once(probe, 'close');
  return port;
}

/**
 * A Cog engine's pool against fake Cog servers, its slots in real Redis: which server a job runs on, a failing server
 * out of the rotation and back, a run followed on its server, and a pool found by DNS (a fake resolver) that changes.
 */
describe('ServerPool against fake Cog servers', () => {
  let env: TestEnvironment;
  let redis: ServiceRedis;
  let slots: EngineSlots;
  let queue: EngineSlotQueue;
  let image: Buffer;
  let output: Buffer;
  const fakes: FakeCog[] = [];
  const pools: ServerPool<CogRoute>[] = [];

  beforeAll(async () => {
    env = await createTestEnvironment();
    redis = new ServiceRedis(env.redisUrl, { ...FAIL_FAST_OPTIONS, keyPrefix: `${env.redisPrefix}:` });
    redis.on('error', () => {});
    await once(redis, 'ready');
    queue = new EngineSlotQueue(redis, { jobLockMs: 30_000, redisPrefix: env.redisPrefix } as AppConfig);
    slots = new EngineSlots(queue);
    image = await sharp({ create: { width: 8, height: 8, channels: 3, background: '#c63' } })
      .png()
      .toBuffer();
    output = await sharp({ create: { width: 80, height: 64, channels: 3, background: '#2a4' } })
      .png()
      .toBuffer();
  }, 30_000);

  afterEach(async () => {
    await Promise.all(pools.splice(0).map((pool) => pool.close()));
    await Promise.all(fakes.splice(0).map((fake) => fake.close()));
  });

  afterAll(async () => {
    queue?.onApplicationShutdown();
    redis?.disconnect();
    await env?.dispose();
  }, 30_000);

  async function fake(
    behaviour: () => FakeCogAnswer = () => ({ kind: 'succeed', image: output }),
    listen: { host?: string; port?: number } = {},
  ): Promise<FakeCog> {
    const started = await startFakeCog(behaviour, { schema: { properties: { image: { type: 'string' } } }, ...listen });
    fakes.push(started);
    return started;
  }

  function pool(
    urls: string[],
    options: { concurrency?: number; discover?: 'dns'; resolve?: Resolve } = {},
  ): ServerPool<CogRoute> & { name: string; concurrency: number } {
    const setting: CogServerSetting = {
      name: `vton-${randomUUID()}`,
      kind: 'cog',
      url: urls[0],
      urls,
      discover: options.discover,
      concurrency: options.concurrency ?? 1,
      timeoutMs: 10_000,
      headers: {},
    };
    const made = new ServerPool<CogRoute>(
      setting,
      (url) => new CogServer({ ...setting, url, urls: [url], discover: undefined }, LIMITS),
      { resolve: options.resolve, discoveryIntervalMs: 50 },
    );
    pools.push(made);
    return Object.assign(made, { name: setting.name, concurrency: setting.concurrency });
  }

  /** One attempt of a job, as the worker runs it: its turn on the engine's slots, then the engine. */
  async function attempt(
    on: ReturnType<typeof pool>,
    jobId: string,
    runs: RunRecord = memoryRuns(),
    signal = new AbortController().signal,
  ): Promise<unknown> {
    const turn = slots.turn(
      { engineName: on.name, concurrency: on.concurrency, timeoutMs: 10_000, pool: on },
      jobId,
      signal,
    );
    try {
      return await on.engineFor(ROUTE).generate({
        jobId,
        tool: 'default',
        generationType: 'default',
        images: { image },
        texts: {},
        runs,
        slot: turn.slot,
        signal,
      });
    } finally {
      await turn.end();
    }
  }

  /** Resolves once the pool's servers are as `predicate` wants them. */
  function poolChange(on: ReturnType<typeof pool>, predicate: () => boolean): Promise<void> {
    return new Promise((resolve) => {
      if (predicate()) return resolve();
      const stop = on.onChange(() => {
        if (!predicate()) return;
        stop();
        resolve();
      });
    });
  }

  const ranOn = (server: FakeCog) => server.requests.map((request) => request.id);

  it('runs jobs on the server with the most free slots: three jobs at once on three servers, one each', async () => {
    let finish!: () => void;
    const held = new Promise((resolve) => (finish = () => resolve(undefined)));
    const servers = await Promise.all(
      [1, 2, 3].map(() => fake(() => ({ kind: 'succeed', image: output, until: held }))),
    );
    const sut = pool(servers.map((server) => server.url));

    const jobs = [randomUUID(), randomUUID(), randomUUID()].map((jobId) => attempt(sut, jobId));
    await Promise.all(servers.map((server) => server.waitFor((it) => it.inFlight().length === 1, 'a job')));
    finish();
    await Promise.all(jobs);

    expect(servers.map((server) => ranOn(server).length)).toEqual([1, 1, 1]);
  });

  it('takes a server answering 5xx out of the rotation, sends the next attempt elsewhere, and puts it back once its probe answers', async () => {
    const failing = await fake(() => ({ kind: 'http', status: 503 }));
    const healthy = await fake();
    const sut = pool([failing.url, healthy.url]);
    const jobId = randomUUID();
    const runs = memoryRuns();

    // Both free, the one used least recently first: the first server in the list, by order of use.
    const first = await attempt(sut, jobId, runs).catch((error: unknown) => error);
    const outOfRotation = sut.servers().find((server) => server.name === failing.url)?.healthy;
    failing.behave(() => ({ kind: 'succeed', image: output }));
    const next = await attempt(sut, jobId, runs);
    await poolChange(sut, () => sut.servers().every((server) => server.healthy));

    expect(first).toBeInstanceOf(TransientEngineError);
    expect(outOfRotation).toBe(false);
    expect(next).toEqual([{ kind: 'encoded', data: output }]);
    expect({ failing: ranOn(failing), healthy: ranOn(healthy) }).toEqual({
      failing: [jobId, jobId, jobId],
      healthy: [jobId],
    });
    expect(failing.calls.some((call) => call.path === '/health-check')).toBe(true);
  });

  it('keeps a server that refuses connections out while its probes fail, and gives its waiting job to another', async () => {
    const gone = await fake();
    const other = await fake();
    const sut = pool([gone.url, other.url]);
    await gone.close();

    const first = await attempt(sut, randomUUID()).catch((error: unknown) => error);
    const jobId = randomUUID();
    const next = await attempt(sut, jobId);

    expect(first).toBeInstanceOf(TransientEngineError);
    expect(sut.servers()).toEqual([
      { name: gone.url, capacity: 1, healthy: false },
      { name: other.url, capacity: 1, healthy: true },
    ]);
    expect(next).toEqual([{ kind: 'encoded', data: output }]);
    expect(ranOn(other)).toEqual([jobId]);
  });

  it('keeps a server out of the rotation in the pool a routing file change makes of it', async () => {
    const gone = await fake();
    const other = await fake();
    const before = pool([gone.url, other.url]);
    await gone.close();
    await attempt(before, randomUUID()).catch(() => undefined);
    const added = await fake();

    const sut = pool([gone.url, other.url, added.url]);
    sut.inherit(before);

    expect(sut.servers().map(({ name, healthy }) => ({ name, healthy }))).toEqual([
      { name: gone.url, healthy: false },
      { name: other.url, healthy: true },
      { name: added.url, healthy: true },
    ]);
  });

  it('sends the next attempt of a job to the server its run is on, though the slots would choose another', async () => {
    const servers = [await fake(() => ({ kind: 'hang' })), await fake(() => ({ kind: 'hang' }))];
    const sut = pool(servers.map((server) => server.url));
    const jobId = randomUUID();
    const runs = memoryRuns();
    const stop = new AbortController();
    const stopped = attempt(sut, jobId, runs, stop.signal).catch((error: unknown) => error);
    await servers[0].waitFor((it) => it.inFlight().length === 1, 'the run on the first server');
    stop.abort(new WorkerShutdown());
    await stopped;
    for (const server of servers) server.behave(() => ({ kind: 'succeed', image: output }));

    // Both free: the slots would give the server used least recently, the second.
    await attempt(sut, jobId, runs);

    expect({ first: ranOn(servers[0]), second: ranOn(servers[1]) }).toEqual({ first: [jobId, jobId], second: [] });
  });

  it('follows the addresses DNS gives: a new one takes jobs, one gone takes none and finishes what it runs', async () => {
    const port = await freePort();
    let finish!: () => void;
    const held = new Promise((resolve) => (finish = () => resolve(undefined)));
    const first = await fake(() => ({ kind: 'succeed', image: output, until: held }), { host: '127.0.0.2', port });
    const second = await fake(() => ({ kind: 'succeed', image: output }), { host: '127.0.0.3', port });
    let addresses = ['127.0.0.2'];
    const sut = pool([`http://gpu.pool.test:${port}`], { discover: 'dns', resolve: () => Promise.resolve(addresses) });
    await sut.ready();
    const running = randomUUID();
    const runningJob = attempt(sut, running);
    await first.waitFor((it) => it.inFlight().length === 1, 'the job on the first address');

    addresses = ['127.0.0.3'];
    await poolChange(
      sut,
      () =>
        sut
          .servers()
          .map((server) => server.name)
          .join() === second.url,
    );
    const next = randomUUID();
    await attempt(sut, next);
    finish();
    await runningJob;

    expect({ first: ranOn(first), second: ranOn(second) }).toEqual({ first: [running], second: [next] });
  });
});
