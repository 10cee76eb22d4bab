import { Inject, Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { AppConfig } from '../config/config.js';
import { REDIS } from '../redis/redis.module.js';
import { JobEvents } from './job-events.js';

/** A line's move is announced at most this often per engine and process: streams show positions once a second. */
const MOVE_INTERVAL_MS = 1000;

/** Which line each queued job stands in: a hash of job id to engine name. */
const LINES = 'queue-line:of';
/** Whose each queued job is: a hash of job id to user id. */
const OWNERS = 'queue-line:owner';
/**
 * What an engine's line (a sorted set of job ids by ticket), its ticket counter (`<engine>:tickets`) and a user's
 * queued jobs (a set, `user:<user id>`) are named after.
 */
const LINE_PREFIX = 'queue-line:';

/**
 * Joins a job to its engine's line unless it stands in one: KEYS = the lines hash, the owners hash, the engine's
 * ticket counter, the engine's line, the user's queued jobs; ARGV = job id, engine, user id. A ticket is the engine's
 * next arrival number, so a line is in arrival order.
 */
const JOIN_SCRIPT = `
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[4], redis.call('INCR', KEYS[3]), ARGV[1])
redis.call('SADD', KEYS[5], ARGV[1])
return 1
`;

/**
 * Takes a job out of its line; returns the line's engine, or false when it stood in none. KEYS = the lines and owners
 * hashes; ARGV = line keys' prefix, id.
 */
const LEAVE_SCRIPT = `
local engine = redis.call('HGET', KEYS[1], ARGV[2])
if not engine then return false end
local owner = redis.call('HGET', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[2])
redis.call('ZREM', ARGV[1] .. engine, ARGV[2])
if owner then redis.call('SREM', ARGV[1] .. 'user:' .. owner, ARGV[2]) end
return engine
`;

/** The 0-based place of each job in its line, -1 for one in none. ARGV = lines prefix, ids... */
const PLACES_SCRIPT = `
local places = {}
for i = 2, #ARGV do
  local engine = redis.call('HGET', KEYS[1], ARGV[i])
  local rank = false
  if engine then rank = redis.call('ZRANK', ARGV[1] .. engine, ARGV[i]) end
  places[i - 1] = rank or -1
end
return places
`;

/** A user's queued jobs with their 0-based places: [id, place, id, place...]. KEYS = lines hash, the user's set. */
const USER_PLACES_SCRIPT = `
local places = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local engine = redis.call('HGET', KEYS[1], id)
  local rank = false
  if engine then rank = redis.call('ZRANK', ARGV[1] .. engine, id) end
  if rank then
    places[#places + 1] = id
    places[#places + 1] = rank
  end
end
return places
`;

interface LineCommands {
  joinLine(
    lines: string,
    owners: string,
    tickets: string,
    line: string,
    userJobs: string,
    id: string,
    engine: string,
    userId: string,
  ): Promise<number>;
  leaveLine(lines: string, owners: string, prefix: string, id: string): Promise<string | null>;
  linePlaces(lines: string, prefix: string, ...ids: string[]): Promise<number[]>;
  userLinePlaces(lines: string, userJobs: string, prefix: string): Promise<(string | number)[]>;
}

/**
 * Each engine's line of queued jobs, in Redis, shared by every process: a job joins its engine's line when it is
 * queued and leaves it when it starts running (it got its engine's slot), or ends or goes without running. Its
 * `queue_position` is 1 + its rank in the line: the jobs of that engine that came before it and have not started. A
 * rank is O(log n) in a sorted set, so a read never walks the queue, and a job that leaves out of turn (canceled,
 * deleted) moves everyone behind it at once, with no counter to fix.
 *
 * Today a worker takes jobs from the one Bull queue in arrival order, whatever their engine, and a job whose engine
 * is busy then waits for a slot: the line's order is the order jobs reach their engine. A per-engine FIFO slot line
 * (EngineSlots handing slots out in arrival order) makes that order exact; it would then be this line itself.
 */
@Injectable()
export class QueueLine implements OnApplicationShutdown {
  private readonly logger = new Logger(QueueLine.name);
  private readonly commands: LineCommands;
  /** The prefix of line keys as Redis names them: a script builds a line's key from the engine it reads. */
  private readonly linePrefix: string;
  /** Per engine, whether another move came while its last announcement's interval runs. */
  private readonly moving = new Map<string, { again: boolean; timer: NodeJS.Timeout }>();

  constructor(
    @Inject(REDIS) redis: Redis,
    private readonly events: JobEvents,
    config: AppConfig,
  ) {
    redis.defineCommand('joinLine', { numberOfKeys: 5, lua: JOIN_SCRIPT });
    redis.defineCommand('leaveLine', { numberOfKeys: 2, lua: LEAVE_SCRIPT });
    redis.defineCommand('linePlaces', { numberOfKeys: 1, lua: PLACES_SCRIPT });
    redis.defineCommand('userLinePlaces', { numberOfKeys: 2, lua: USER_PLACES_SCRIPT });
    this.commands = redis as unknown as LineCommands;
    this.linePrefix = `${config.redisPrefix}:${LINE_PREFIX}`;
  }

  /** Puts a user's queued job at the back of its engine's line; a job already in a line keeps its place. */
  async join(id: string, engine: string, userId: string): Promise<void> {
    await this.commands.joinLine(
      LINES,
      OWNERS,
      `${LINE_PREFIX}${engine}:tickets`,
      `${LINE_PREFIX}${engine}`,
      `${LINE_PREFIX}user:${userId}`,
      id,
      engine,
      userId,
    );
  }

  /**
   * Takes the job out of its line (it started, ended or went), and tells streams the jobs behind it moved up. A failure
   * is logged, not raised: the change it follows is committed, and the job is taken out again when a worker is handed
   * it (every queued job is, or is dropped by its end).
   */
  async leave(id: string): Promise<void> {
    try {
      const engine = await this.commands.leaveLine(LINES, OWNERS, this.linePrefix, id);
      if (engine !== null) this.moved(engine);
    } catch (error) {
      this.logger.warn({ err: error, id }, 'a job was not taken out of its queue line');
    }
  }

  /** The `queue_position` of each of these jobs that stands in a line (1: next); one Redis call for them all. */
  async positions(ids: readonly string[]): Promise<Map<string, number>> {
    if (ids.length === 0) return new Map();
    const places = await this.commands.linePlaces(LINES, this.linePrefix, ...ids);
    const found = new Map<string, number>();
    places.forEach((place, index) => {
      if (place >= 0) found.set(ids[index], place + 1);
    });
    return found;
  }

  /** The `queue_position` of each of the user's queued jobs (at most their pending limit); one Redis call. */
  async positionsOfUser(userId: string): Promise<Map<string, number>> {
    const flat = await this.commands.userLinePlaces(LINES, `${LINE_PREFIX}user:${userId}`, this.linePrefix);
    const found = new Map<string, number>();
    for (let index = 0; index < flat.length; index += 2) found.set(String(flat[index]), Number(flat[index + 1]) + 1);
    return found;
  }

  onApplicationShutdown(): void {
    for (const { timer } of this.moving.values()) clearTimeout(timer);
  }

  /** Announces a move of `engine`'s line at once, and one more at the end of the interval if more came meanwhile. */
  private moved(engine: string): void {
    const current = this.moving.get(engine);
    if (current) {
      current.again = true;
      return;
    }
    this.announce(engine);
    const state = {
      again: false,
      timer: setTimeout(() => {
        this.moving.delete(engine);
        if (state.again) this.moved(engine);
      }, MOVE_INTERVAL_MS).unref(),
    };
    this.moving.set(engine, state);
  }

  private announce(engine: string): void {
    this.events.announceLineMoved(engine).catch((error: unknown) => {
      this.logger.warn({ err: error, engine }, 'a move of a queue line was not announced');
    });
  }
}
