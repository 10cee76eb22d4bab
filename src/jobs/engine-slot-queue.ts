import { randomUUID } from 'node:crypto';
import { Inject, Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { outsideTraces } from '../common/tracing.js';
import { AppConfig } from '../config/config.js';
import { REDIS } from '../redis/redis.module.js';

/** One model server of an engine's pool, as the slots see it. */
export interface SlotServer {
  /** What the slot is kept with, and what the holder is told it holds: the server's address, or the engine's name. */
  readonly name: string;
  /** Jobs it takes at once, across all workers. */
  readonly capacity: number;
  /** A server out of the rotation gives no new slot; the slots its jobs hold still count. */
  readonly healthy: boolean;
}

/** A slot one job holds on one server. */
export interface HeldSlot {
  readonly server: string;
  /** Frees the slot: the job that has waited longest for the engine takes it. */
  release(): Promise<void>;
  /** Stops renewing the lease without freeing the slot: it lapses unless the job's next attempt takes it over. */
  leave(): void;
}

/** Every key of the slots: `engine-slots:<engine>:<part>`, and these two shared by all engines. */
const PREFIX = 'engine-slots:';
/** The processes that wait or hold here, each with its lease: a waiter whose process lapsed is passed over. */
const PROCESSES_KEY = `${PREFIX}processes`;
/** The engines that ever had a slot taken, for `forget` without an engine. */
const ENGINES_KEY = `${PREFIX}engines`;
/**
 * How far a worker's clock is trusted: a waiter's place is the moment its worker began waiting, by the worker's clock,
 * kept within this of Redis's. Redis reads each connection's commands in turn, so under load the arrivals of one moment
 * on several workers would otherwise be ordered by connection; a worker whose clock is behind gains no more than this.
 */
const CLOCK_TRUST_MS = 1000;

/**
 * The Lua shared by the scripts that hand slots out. KEYS: holders (hash job -> "<lease expiry ms>|<server>"),
 * queue (sorted set of "<process>|<job>" by the time it began waiting), used (hash server -> when it last took a job), processes (sorted set
 * process -> lease expiry), dropped (hash process -> 1: its waiters were passed over while its lease had lapsed).
 * ARGV: the processes' channel prefix, the engine, the lease in ms, the servers as JSON [[name, capacity, healthy]].
 * Time is Redis's own, so that the workers' clocks need not agree.
 */
const COMMON_LUA = `
local holders_key, queue_key, used_key, processes_key, dropped_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local channel_prefix, engine, lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3])
local servers = cjson.decode(ARGV[4])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_exact = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000
-- In microseconds, one more for each grant here: no script takes less than a microsecond a grant.
local last_use = tonumber(time[1]) * 1000000 + tonumber(time[2])
local holders, busy, next_expiry = {}, {}, nil

local function lease_until(server)
  return string.format('%d', now + lease_ms) .. '|' .. server
end

-- The live holders and each server's busy count; lapsed holders go (their worker died or stopped renewing).
local function load()
  local flat = redis.call('HGETALL', holders_key)
  local expired = {}
  for i = 1, #flat, 2 do
    local value = flat[i + 1]
    local bar = string.find(value, '|', 1, true)
    local expiry = tonumber(string.sub(value, 1, bar - 1))
    local server = string.sub(value, bar + 1)
    if expiry <= now then
      expired[#expired + 1] = flat[i]
    else
      holders[flat[i]] = server
      busy[server] = (busy[server] or 0) + 1
      if next_expiry == nil or expiry < next_expiry then next_expiry = expiry end
    end
  end
  if #expired > 0 then redis.call('HDEL', holders_key, unpack(expired)) end
end

-- The healthy server with the most free slots; ties go to the one that took a job least recently. Nil: none free.
local function choose()
  local best, tied = 0, {}
  for _, server in ipairs(servers) do
    if server[3] then
      local free = server[2] - (busy[server[1]] or 0)
      if free > best then
        best, tied = free, { server[1] }
      elseif free == best and free > 0 then
        tied[#tied + 1] = server[1]
      end
    end
  end
  if #tied <= 1 then return tied[1] end
  local used = redis.call('HMGET', used_key, unpack(tied))
  local pick, oldest = tied[1], tonumber(used[1]) or 0
  for i = 2, #tied do
    local at = tonumber(used[i]) or 0
    if at < oldest then pick, oldest = tied[i], at end
  end
  return pick
end

local function grant(job, server)
  redis.call('HSET', holders_key, job, lease_until(server))
  holders[job] = server
  busy[server] = (busy[server] or 0) + 1
  if next_expiry == nil then next_expiry = now + lease_ms end
  if #servers > 1 then
    last_use = last_use + 1
    redis.call('HSET', used_key, server, string.format('%d', last_use))
  end
end

-- Hands free slots to the oldest waiters and tells each one's process. Returns a free server once no one waits.
local function settle()
  local alive = {}
  while true do
    local server = choose()
    if server == nil then return nil end
    local popped = redis.call('ZPOPMIN', queue_key)
    if #popped == 0 then return server end
    local entry = popped[1]
    local bar = string.find(entry, '|', 1, true)
    local process, job = string.sub(entry, 1, bar - 1), string.sub(entry, bar + 1)
    if alive[process] == nil then
      local lease = redis.call('ZSCORE', processes_key, process)
      alive[process] = lease ~= false and tonumber(lease) > now
    end
    if alive[process] then
      -- A waiter whose job another run holds a slot for shares that slot.
      if not holders[job] then grant(job, server) end
      redis.call('PUBLISH', channel_prefix .. process, cjson.encode({ engine, job, holders[job] }))
    else
      redis.call('HSET', dropped_key, process, 1)
      -- Kept as long as a process cut off from Redis could still come back with its jobs.
      redis.call('PEXPIRE', dropped_key, lease_ms * 3)
    end
  end
end
`;

/**
 * KEYS[6] the engines' set. ARGV[5] the process, ARGV[6] the job, ARGV[7] when it began waiting (ms, the worker's
 * clock). Returns [server] once the job holds a slot, [] once it waits in the queue.
 */
const ACQUIRE_LUA = `${COMMON_LUA}
local process, job = ARGV[5], ARGV[6]
local arrived = math.min(math.max(tonumber(ARGV[7]), now_exact - ${CLOCK_TRUST_MS}), now_exact)
redis.call('ZADD', processes_key, now + lease_ms, process)
redis.call('SADD', KEYS[6], engine)
load()
if not holders[job] then
  local free = settle()
  if free and not holders[job] then grant(job, free) end
end
if holders[job] then
  -- Another run of the job (its queue lock lapsed) holds a slot: this one shares it rather than taking a second.
  redis.call('HSET', holders_key, job, lease_until(holders[job]))
  return { holders[job] }
end
redis.call('ZADD', queue_key, arrived, process .. '|' .. job)
return {}
`;

/**
 * ARGV[5] the job, ARGV[6] its queue entry when it gave up waiting (else ''). Frees the job's slot, or takes it out of
 * the queue, and hands what is free to the oldest waiters.
 */
const RELEASE_LUA = `${COMMON_LUA}
local job, entry = ARGV[5], ARGV[6]
if entry ~= '' and redis.call('ZREM', queue_key, entry) > 0 then return 0 end
redis.call('HDEL', holders_key, job)
load()
settle()
return 1
`;

/**
 * One process's look at one engine, every so often: ARGV[5] the process, ARGV[6] JSON of the jobs it holds slots for
 * (renewed). Returns [jobs whose slot was lost, [job, server...] of every holder (the process's waiters among them
 * missed their notification), ms until the first holder's lease lapses (-1: none), 1 if the process's waiters were
 * passed over while its lease had lapsed (else 0)]. Its waiters are not named: a look costs the same however many wait.
 */
const SWEEP_LUA = `${COMMON_LUA}
local process = ARGV[5]
redis.call('ZREMRANGEBYSCORE', processes_key, '-inf', now)
redis.call('ZADD', processes_key, now + lease_ms, process)
load()
local renewed, lost = {}, {}
for _, job in ipairs(cjson.decode(ARGV[6])) do
  if holders[job] then
    renewed[#renewed + 1] = job
    renewed[#renewed + 1] = lease_until(holders[job])
  else
    lost[#lost + 1] = job
  end
end
if #renewed > 0 then redis.call('HSET', holders_key, unpack(renewed)) end
settle()
local held = {}
for job, server in pairs(holders) do
  held[#held + 1] = job
  held[#held + 1] = server
end
local wait = -1
if next_expiry then wait = next_expiry - now end
return { lost, held, wait, redis.call('HDEL', dropped_key, process) }
`;

/**
 * KEYS: holders, queue. ARGV: the channel prefix, the engine, JSON of the jobs. Takes the jobs out of both; the process
 * of the oldest waiter, which knows the engine's servers, is asked to hand out what that freed.
 */
const FORGET_LUA = `
local jobs = cjson.decode(ARGV[3])
local forgotten = redis.call('HDEL', KEYS[1], unpack(jobs))
local wanted = {}
for _, job in ipairs(jobs) do wanted[job] = true end
for _, entry in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  if wanted[string.sub(entry, string.find(entry, '|', 1, true) + 1)] then
    forgotten = forgotten + redis.call('ZREM', KEYS[2], entry)
  end
end
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if forgotten > 0 and head then
  redis.call('PUBLISH', ARGV[1] .. string.sub(head, 1, string.find(head, '|', 1, true) - 1), cjson.encode({ ARGV[2] }))
end
return forgotten
`;

type Keys = [string, string, string, string, string];
interface SlotCommands {
  acquireEngineSlot(...args: [...Keys, string, ...string[]]): Promise<string[]>;
  releaseEngineSlot(...args: [...Keys, ...string[]]): Promise<number>;
  sweepEngineSlots(...args: [...Keys, ...string[]]): Promise<[string[], string[], number, number]>;
  forgetEngineSlots(holders: string, queue: string, channel: string, engine: string, jobs: string): Promise<number>;
}

/** A job waiting in this process, and what it is told once it holds a slot. */
interface Waiter {
  /** When it began waiting, in ms by this process's clock. */
  arrived: number;
  granted(server: string): void;
}

/** What this process waits for and holds of one engine. */
interface EngineState {
  /** The pool as the last acquire here gave it, in the scripts' form. */
  servers: string;
  waiters: Map<string, Set<Waiter>>;
  /** Jobs holding a slot here, renewed by each sweep, each with the signal that stops it. */
  holders: Map<string, AbortSignal>;
  timer?: NodeJS.Timeout;
  sweeping?: Promise<void>;
  sweepAgain?: boolean;
}

/**
 * The slots of the remote engines, counted across every worker process: acquire, release and forget, and no other
 * file touches their keys. First come, first served: a job that finds no free slot joins its engine's queue in Redis
 * (in the order the jobs began waiting, CLOCK_TRUST_MS), and whoever frees a slot hands it, in the same script, to
 * the oldest waiter on the healthy server with the most free
 * slots (ties: the one that took a job least recently), and tells that waiter's process on its own channel. Waiting
 * costs Redis nothing per waiter: each process with a waiter or a holder looks once per engine every third of
 * JOB_LOCK_MS (renewing its holders' leases and its own, catching a notification lost while its subscriber was away),
 * and again when the first holder's lease would lapse, so that a dead worker's slot goes to the next waiter within
 * JOB_LOCK_MS. A waiter whose process stopped renewing is passed over.
 *
 * Hand-written: redis-semaphore and the other Redis semaphores on npm poll, every waiter trying again every few
 * milliseconds in no order; the fair, blocking ones (Ruby's redis-semaphore, Python's redis-fifo-lock) are mutexes or
 * block a connection per waiter (BLPOP).
 */
@Injectable()
export class EngineSlotQueue implements OnApplicationShutdown {
  private readonly logger = new Logger(EngineSlotQueue.name);
  private readonly commands: SlotCommands;
  /** This process as its waiters are queued: what its channel is named after. */
  private readonly process = randomUUID();
  private readonly channelPrefix: string;
  private readonly engines = new Map<string, EngineState>();
  private subscriber?: Redis;
  private listening?: Promise<unknown>;
  private closed = false;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
  ) {
    redis.defineCommand('acquireEngineSlot', { numberOfKeys: 6, lua: ACQUIRE_LUA });
    redis.defineCommand('releaseEngineSlot', { numberOfKeys: 5, lua: RELEASE_LUA });
    redis.defineCommand('sweepEngineSlots', { numberOfKeys: 5, lua: SWEEP_LUA });
    redis.defineCommand('forgetEngineSlots', { numberOfKeys: 2, lua: FORGET_LUA });
    this.commands = redis as unknown as SlotCommands;
    this.channelPrefix = `${config.redisPrefix}:${PREFIX}`;
  }

  /**
   * Resolves once the job holds a slot on one of `servers` (their capacities held at once, across all workers), with
   * the server and what frees or leaves the slot; rejects with the signal's reason if it fires first. A job another
   * run of which holds a slot (its queue lock lapsed) shares that slot.
   */
  async acquire(engine: string, servers: readonly SlotServer[], jobId: string, signal: AbortSignal): Promise<HeldSlot> {
    const arrived = performance.timeOrigin + performance.now();
    signal.throwIfAborted();
    const state = this.stateOf(engine);
    state.servers = JSON.stringify(servers.map((server) => [server.name, server.capacity, server.healthy]));
    let onAbort!: () => void;
    const aborted = new Promise<never>((_, reject) => {
      onAbort = () => reject(signal.reason as Error);
      signal.addEventListener('abort', onAbort, { once: true });
    });
    aborted.catch(() => {});
    let granted!: (server: string) => void;
    const turn = new Promise<string>((resolve) => (granted = resolve));
    // Known before the script runs: another process may hand this waiter a slot before the script's answer is read.
    const waiter: Waiter = { arrived, granted };
    const waiters = state.waiters.get(jobId) ?? new Set();
    state.waiters.set(jobId, waiters);
    waiters.add(waiter);
    let queued = false;
    try {
      await Promise.race([this.listen(), aborted]);
      const answer = await this.commands.acquireEngineSlot(
        ...this.keysOf(engine),
        ENGINES_KEY,
        ...this.argsOf(engine, state),
        this.process,
        jobId,
        arrived.toFixed(3),
      );
      if (answer.length > 0) return this.hold(engine, state, jobId, answer[0], signal);
      queued = true;
      this.schedule(engine, state);
      return this.hold(engine, state, jobId, await Promise.race([turn, aborted]), signal);
    } catch (error) {
      // Out of the queue, or, if a slot was handed over meanwhile, that slot freed for the next waiter.
      if (queued) {
        await this.commands
          .releaseEngineSlot(...this.keysOf(engine), ...this.argsOf(engine, state), jobId, `${this.process}|${jobId}`)
          .catch((cause: unknown) => this.logger.warn({ err: cause, id: jobId, engine }, 'a waiter did not leave'));
      }
      throw error;
    } finally {
      signal.removeEventListener('abort', onAbort);
      waiters.delete(waiter);
      if (waiters.size === 0 && state.waiters.get(jobId) === waiters) state.waiters.delete(jobId);
      this.schedule(engine, state);
    }
  }

  /**
   * The engine's pool changed (a server left or came back to the rotation, DNS found or lost one): the next hand-outs
   * here go by it, and whoever waits here is handed what it frees at once.
   */
  update(engine: string, servers: readonly SlotServer[]): void {
    const state = this.stateOf(engine);
    state.servers = JSON.stringify(servers.map((server) => [server.name, server.capacity, server.healthy]));
    if (state.waiters.size > 0) this.sweep(engine);
  }

  /** Jobs of this process that wait for a slot of the engine. */
  waiting(engine: string): number {
    return this.engines.get(engine)?.waiters.size ?? 0;
  }

  /** Slots held on each server of the engine, across every worker, by Redis's holders (lapsed ones not counted). */
  async busy(engine: string): Promise<Record<string, number>> {
    const [holders] = this.keysOf(engine);
    const [seconds, micros] = await this.redis.time();
    const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    const busy: Record<string, number> = {};
    for (const value of Object.values(await this.redis.hgetall(holders))) {
      const bar = value.indexOf('|');
      if (Number(value.slice(0, bar)) <= now) continue;
      const server = value.slice(bar + 1);
      busy[server] = (busy[server] ?? 0) + 1;
    }
    return busy;
  }

  /**
   * Takes these jobs' slots and places in the queue away, on `engine` or on every engine: for a job whose run was
   * stopped between attempts, and for a removed user's jobs. Returns how many there were.
   */
  async forget(jobIds: readonly string[], engine?: string): Promise<number> {
    if (jobIds.length === 0) return 0;
    const engines = engine === undefined ? await this.redis.smembers(ENGINES_KEY) : [engine];
    let forgotten = 0;
    for (const name of engines) {
      const [holders, queue] = this.keysOf(name);
      forgotten += await this.commands.forgetEngineSlots(
        holders,
        queue,
        this.channelPrefix,
        name,
        JSON.stringify(jobIds),
      );
    }
    return forgotten;
  }

  onApplicationShutdown(): void {
    this.closed = true;
    for (const state of this.engines.values()) clearTimeout(state.timer);
    // Nothing it was sent matters once the process stops: no graceful quit to wait for.
    this.subscriber?.disconnect();
    this.subscriber = undefined;
  }

  private hold(engine: string, state: EngineState, jobId: string, server: string, signal: AbortSignal): HeldSlot {
    state.holders.set(jobId, signal);
    this.schedule(engine, state);
    let held = true;
    const stopRenewing = () => {
      if (!held) return false;
      held = false;
      if (state.holders.get(jobId) === signal) state.holders.delete(jobId);
      this.schedule(engine, state);
      return true;
    };
    return {
      server,
      release: async () => {
        if (!stopRenewing()) return;
        await this.commands
          .releaseEngineSlot(...this.keysOf(engine), ...this.argsOf(engine, state), jobId, '')
          .catch((error: unknown) => this.logger.warn({ err: error, id: jobId }, 'a slot was not freed'));
      },
      leave: () => void stopRenewing(),
    };
  }

  private stateOf(engine: string): EngineState {
    let state = this.engines.get(engine);
    if (!state) {
      state = { servers: '[]', waiters: new Map(), holders: new Map() };
      this.engines.set(engine, state);
    }
    return state;
  }

  private keysOf(engine: string): Keys {
    const base = `${PREFIX}${engine}:`;
    return [`${base}holders`, `${base}queue`, `${base}used`, PROCESSES_KEY, `${base}dropped`];
  }

  private argsOf(engine: string, state: EngineState): string[] {
    return [this.channelPrefix, engine, String(this.config.jobLockMs), state.servers];
  }

  /** The next look at the engine: a third of the lease away, sooner when a holder's lease lapses first. */
  private schedule(engine: string, state: EngineState, firstLapseMs = -1): void {
    clearTimeout(state.timer);
    state.timer = undefined;
    if (this.closed || (state.waiters.size === 0 && state.holders.size === 0)) return;
    let delay = Math.max(1, Math.floor(this.config.jobLockMs / 3));
    if (state.waiters.size > 0 && firstLapseMs >= 0) delay = Math.min(delay, firstLapseMs + 1);
    state.timer = setTimeout(() => this.sweep(engine), delay).unref();
  }

  private sweep(engine: string): void {
    const state = this.stateOf(engine);
    if (state.sweeping) {
      state.sweepAgain = true;
      return;
    }
    state.sweeping = outsideTraces(() => this.sweepOnce(engine, state)).finally(() => {
      state.sweeping = undefined;
      if (state.sweepAgain) {
        state.sweepAgain = false;
        this.sweep(engine);
      }
    });
  }

  private async sweepOnce(engine: string, state: EngineState): Promise<void> {
    let firstLapseMs = -1;
    try {
      const [lost, held, lapse, passedOver] = await this.commands.sweepEngineSlots(
        ...this.keysOf(engine),
        ...this.argsOf(engine, state),
        this.process,
        JSON.stringify([...state.holders.keys()]),
      );
      firstLapseMs = lapse;
      for (const jobId of lost) {
        const signal = state.holders.get(jobId);
        if (!signal) continue;
        state.holders.delete(jobId);
        // A job deleted as it runs has its slot freed by the process that deleted it, while this one stops it.
        if (signal.aborted) this.logger.debug({ id: jobId, engine }, 'the slot of a stopped job was freed elsewhere');
        else this.logger.warn({ id: jobId, engine }, 'an engine slot lapsed while its job ran');
      }
      for (let index = 0; index < held.length; index += 2) this.grant(engine, held[index], held[index + 1]);
      // This process's lease lapsed (a pause longer than it, or Redis out of reach) and others passed its waiters
      // over: they queue again, each at its arrival or at most CLOCK_TRUST_MS ago.
      if (passedOver === 1) for (const jobId of state.waiters.keys()) await this.requeue(engine, state, jobId);
    } catch (error) {
      this.logger.warn({ err: error, engine }, 'could not look at the engine slots');
    }
    this.schedule(engine, state, firstLapseMs);
  }

  private async requeue(engine: string, state: EngineState, jobId: string): Promise<void> {
    const waiters = state.waiters.get(jobId);
    if (!waiters || waiters.size === 0) return;
    const arrived = Math.min(...[...waiters].map((waiter) => waiter.arrived));
    const [server] = await this.commands.acquireEngineSlot(
      ...this.keysOf(engine),
      ENGINES_KEY,
      ...this.argsOf(engine, state),
      this.process,
      jobId,
      arrived.toFixed(3),
    );
    this.grant(engine, jobId, server);
  }

  private grant(engine: string, jobId: string, server: string | undefined): void {
    const waiters = this.engines.get(engine)?.waiters.get(jobId);
    if (!waiters || server === undefined) return;
    for (const waiter of waiters) waiter.granted(server);
  }

  /** Resolves once this process's channel is subscribed: a grant published before that would wait for a sweep. */
  private listen(): Promise<unknown> {
    this.listening ??= outsideTraces(() => {
      // A connection of its own: a subscribed connection can do nothing else. It subscribes again after a reconnect,
      // and a look at every engine then finds what was handed over while it was away.
      const subscriber = this.redis.duplicate({
        keyPrefix: '',
        maxRetriesPerRequest: null,
        enableOfflineQueue: true,
        commandTimeout: undefined,
        connectionName: `${this.channelPrefix}${this.process}`,
      });
      this.subscriber = subscriber;
      subscriber.on('error', () => {});
      subscriber.on('message', (_channel: string, message: string) => {
        const [engine, jobId, server] = JSON.parse(message) as [string, string?, string?];
        // Without a job: slots were freed by a process that does not know the pool; this one does.
        if (jobId === undefined) this.sweep(engine);
        else this.grant(engine, jobId, server);
      });
      let connectedBefore = false;
      subscriber.on('ready', () => {
        if (connectedBefore) for (const engine of this.engines.keys()) this.sweep(engine);
        connectedBefore = true;
      });
      return subscriber.subscribe(`${this.channelPrefix}${this.process}`).catch((error: unknown) => {
        // The next acquire tries again.
        this.listening = undefined;
        subscriber.disconnect();
        throw error;
      });
    });
    return this.listening;
  }
}
