/**
 * slots: what waiting for an engine slot costs Redis, and whether the waiters are served in the order they came.
 * Four EngineSlotQueue instances from dist/ in this process stand for four workers (each with its own connections and
 * channel), on a redis-server of the bench's own, so that INFO commandstats counts nothing but the slots (every
 * command, those the slots' Lua scripts run included).
 *
 * 1,000 jobs arrive for one engine of 4 slots, four at a time (one on each worker, in the same tick, so that their
 * scripts race), a group every 4 ms. The first four hold their slots while the rest wait:
 * 1. Commands/s over 10 s while nobody frees a slot: what waiting costs.
 * 2. Commands/s over 10 s while each slot is freed 100 ms after it was taken (about 40 handovers a second), the
 *    queue still long: what a handover costs. Target: 50 a second plus 10 per handover.
 * 3. Then on until all are served: the largest number of later arrivals served before an earlier one (arrival: the
 *    order in which the bench called acquire; served: the order in which Redis gave the jobs their slots, as MONITOR
 *    shows the scripts' writes). Target: the number of workers. Printed too: the same count in the order in which the
 *    workers learned of their slots (acquire resolved), which also counts how late this one process, sharing its CPU,
 *    read each worker's notifications.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { Redis } from 'ioredis';
import { freePort, fromDist, log, onCleanup, record, sleep } from '../lib.mjs';

const WORKERS = 4;
const SLOTS = 4;
const JOBS = 1000;
const GROUP_EVERY_MS = 4;
const WINDOW_MS = 10_000;
const HOLD_MS = 100;
const JOB_LOCK_MS = 30_000;
const ENGINE = 'gpu';
const SERVERS = [{ name: 'gpu-1', capacity: SLOTS, healthy: true }];

export const description = `Redis commands/s while ${JOBS.toLocaleString('en')} jobs on ${WORKERS} workers wait for ${SLOTS} slots (held, then handed over every ${HOLD_MS} ms), and the order they are served in`;

/** A redis-server of the bench's own, on a free port, stopped at the end. */
async function startRedis() {
  const port = await freePort();
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    {
      stdio: 'ignore',
    },
  );
  const exited = once(child, 'exit');
  onCleanup(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await exited;
    }
  });
  const url = `redis://127.0.0.1:${port}`;
  // Tried again every 100 ms until the server listens.
  const probe = new Redis(url, { retryStrategy: () => 100, maxRetriesPerRequest: null });
  probe.on('error', () => {});
  const timeout = sleep(10_000).then(() => {
    throw new Error(`redis-server did not start on port ${port}`);
  });
  await Promise.race([new Promise((resolve) => probe.once('ready', resolve)), timeout]);
  onCleanup(() => probe.disconnect());
  return { url, probe };
}

/** Commands Redis has run so far, every kind together. */
async function commandsSoFar(probe) {
  const info = await probe.info('commandstats');
  let calls = 0;
  for (const match of info.matchAll(/calls=(\d+)/g)) calls += Number(match[1]);
  return calls;
}

/** Commands per second over `ms`, and `counter()`'s growth per second meanwhile (the INFO reads themselves left out). */
async function rateOver(probe, ms, counter) {
  const [commands, count, started] = [await commandsSoFar(probe), counter(), performance.now()];
  await sleep(ms);
  const [commandsAfter, countAfter, seconds] = [
    await commandsSoFar(probe),
    counter(),
    (performance.now() - started) / 1000,
  ];
  return { commands: (commandsAfter - commands - 1) / seconds, counted: (countAfter - count) / seconds };
}

/** The largest number of later arrivals (higher job numbers) served before an earlier one, in `order`. */
function mostOvertaken(order) {
  if (order.length !== JOBS) throw new Error(`${order.length} of ${JOBS} jobs seen served`);
  const position = new Map(order.map((job, at) => [job, at]));
  let worst = 0;
  for (let job = 0; job < JOBS; job++) {
    let overtaken = 0;
    for (let later = job + 1; later < JOBS; later++) if (position.get(later) < position.get(job)) overtaken++;
    worst = Math.max(worst, overtaken);
  }
  return worst;
}

export async function run() {
  const { url, probe } = await startRedis();
  const { EngineSlotQueue } = await fromDist('jobs/engine-slot-queue.js');
  const { FAIL_FAST_OPTIONS, ServiceRedis } = await fromDist('redis/redis.js');
  const workers = [];
  for (let index = 0; index < WORKERS; index++) {
    const connection = new ServiceRedis(url, { ...FAIL_FAST_OPTIONS, keyPrefix: 'bench:' });
    connection.on('error', () => {});
    await once(connection, 'ready');
    const sut = new EngineSlotQueue(connection, { jobLockMs: JOB_LOCK_MS, redisPrefix: 'bench' });
    workers.push(sut);
    onCleanup(() => {
      sut.onApplicationShutdown();
      connection.disconnect();
    });
  }

  // Each worker subscribes to its channel once in its life: before the first arrival, as a running worker has.
  for (const worker of workers) {
    await (await worker.acquire('warm-up', SERVERS, 'warm-up', new AbortController().signal)).release();
  }

  // The order in which Redis gave jobs their slots: each job's first write to the holders' hash (a later one renews).
  const granted = [];
  const seen = new Set();
  const monitor = await new Redis(url).monitor();
  onCleanup(() => monitor.disconnect());
  monitor.on('monitor', (_time, args) => {
    if (args[0]?.toLowerCase() !== 'hset' || args[1] !== `bench:engine-slots:${ENGINE}:holders`) return;
    for (let index = 2; index < args.length; index += 2) {
      const job = args[index];
      if (!seen.has(job)) {
        seen.add(job);
        granted.push(Number(job.slice('job-'.length)));
      }
    }
  });

  let startHanding;
  const handing = new Promise((resolve) => (startHanding = resolve));
  const served = [];
  let handovers = 0;
  const jobs = [];
  for (let index = 0; index < JOBS; index++) {
    const worker = workers[index % WORKERS];
    jobs.push(
      (async () => {
        const slot = await worker.acquire(ENGINE, SERVERS, `job-${index}`, new AbortController().signal);
        served.push(index);
        await handing;
        await sleep(HOLD_MS);
        handovers++;
        await slot.release();
      })(),
    );
    if (index % WORKERS === WORKERS - 1) await sleep(GROUP_EVERY_MS);
  }
  const queueKey = `bench:engine-slots:${ENGINE}:queue`;
  while ((await probe.zcard(queueKey)) < JOBS - SLOTS) await sleep(50);

  const waiting = await rateOver(probe, WINDOW_MS, () => handovers);
  record(
    'slots',
    `Redis commands/s while ${JOBS - SLOTS} jobs wait for ${SLOTS} held slots (${WORKERS} workers)`,
    waiting.commands,
    `${waiting.commands.toFixed(1)}/s`,
    { op: '<=', value: 50, text: '<= 50' },
  );

  startHanding();
  const served100 = await rateOver(probe, WINDOW_MS, () => handovers);
  const allowed = 50 + 10 * served100.counted;
  record(
    'slots',
    `Redis commands/s while the queue is served, each slot freed ${HOLD_MS} ms after it was taken`,
    served100.commands,
    `${served100.commands.toFixed(0)}/s at ${served100.counted.toFixed(1)} handovers/s (${(served100.commands / served100.counted).toFixed(1)} per handover)`,
    { op: '<=', value: allowed, text: `<= 50 + 10 per handover (${allowed.toFixed(0)})` },
  );
  log(`  (${JOBS - served.length} jobs still waiting at the end of the window)`);

  await Promise.all(jobs);
  const worst = mostOvertaken(granted);
  log(`  (in the order the workers learned of their slots: ${mostOvertaken(served)})`);
  record(
    'slots',
    `most later arrivals served before an earlier one (${JOBS.toLocaleString('en')} jobs, ${WORKERS} arriving at once every ${GROUP_EVERY_MS} ms)`,
    worst,
    String(worst),
    { op: '<=', value: WORKERS, text: `<= ${WORKERS} (the workers)` },
  );
}
