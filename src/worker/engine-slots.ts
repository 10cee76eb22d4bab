import { EventEmitter } from 'node:events';
import { Inject, Injectable, Logger } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { Semaphore } from 'redis-semaphore';
import { inSpan, outsideTraces } from '../common/tracing.js';
import { AppConfig } from '../config/config.js';
import type { EngineSlot } from '../engines/index.js';
import { ENGINE_SLOTS } from '../jobs/engine-runs.js';
import { REDIS } from '../redis/redis.module.js';

/** A slot one job holds. */
interface HeldSlot {
  release(): Promise<void>;
  /** Stops renewing the lease without freeing the slot. */
  leave(): void;
}

/** How often a job waiting for a slot tries again, unless a slot is freed in its own process first. */
const RETRY_INTERVAL_MS = 20;

/**
 * Slots of each remote engine, counted across every worker process (a GPU serves one or two jobs at a time): a Redis
 * semaphore per engine (redis-semaphore). A slot is a lease renewed while its job runs, so a crashed worker's slot is
 * free once JOB_LOCK_MS has passed, as its queue lock is. The slot is named after the job: a second run of the same job
 * (its queue lock lapsed) shares the first run's slot rather than taking another.
 */
@Injectable()
export class EngineSlots {
  private readonly logger = new Logger(EngineSlots.name);
  /** Slots freed in this process: a waiter here tries at once instead of at its next interval. */
  private readonly freed = new EventEmitter().setMaxListeners(0);

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly config: AppConfig,
  ) {}

  /**
   * Resolves once the job holds a slot of `engine` (at most `concurrency` held at once), with the functions that free
   * it and that leave it held for the job's next attempt (its lease no longer renewed here); rejects with the signal's
   * reason if it fires first.
   */
  async acquire(engine: string, concurrency: number, jobId: string, signal: AbortSignal): Promise<HeldSlot> {
    const key = `${ENGINE_SLOTS}${engine}`;
    const options = {
      identifier: jobId,
      lockTimeout: this.config.jobLockMs,
      refreshInterval: Math.max(100, Math.floor(this.config.jobLockMs / 3)),
      onLockLost: (error: Error) => {
        // A job deleted as it runs has its slot freed by the process that deleted it, while this one stops it.
        if (signal.aborted) this.logger.debug({ id: jobId, engine }, 'the slot of a stopped job was freed elsewhere');
        else this.logger.warn({ err: error, id: jobId, engine }, 'an engine slot lapsed while its job ran');
      },
    };
    const shared = new Semaphore(this.redis, key, concurrency, { ...options, acquiredExternally: true });
    const own = new Semaphore(this.redis, key, concurrency, options);
    // One span for the wait, not one per try (every RETRY_INTERVAL_MS while the server is busy: thousands for a job
    // queued a minute), nor per renewal of the lease, which a try that succeeds starts.
    const slot = await inSpan('wait for engine slot', { attributes: { 'igs.engine.name': engine } }, async () => {
      for (;;) {
        signal.throwIfAborted();
        // Another run of this job holding a slot (its queue lock lapsed) shares it rather than taking a second one.
        if (await outsideTraces(() => shared.tryAcquire())) return shared;
        if (await outsideTraces(() => own.tryAcquire())) return own;
        await this.freedOrRetry(engine, signal);
      }
    });
    return {
      release: async () => {
        const released = slot.release();
        // A waiter here asks at once: its command follows the release on the same Redis connection, so Redis has freed
        // the slot by the time it asks, and the handover costs one round trip instead of two.
        this.freed.emit(engine);
        await released.catch((error: unknown) => this.logger.warn({ err: error, id: jobId }, 'a slot was not freed'));
      },
      leave: () => slot.stopRefresh(),
    };
  }

  /**
   * One job's turn on its engine, and the engine's timeout: the slot the engine takes when it hands the job to its model
   * server (none for an engine without `concurrency`), the signal that fires once the job has been with its engine
   * `timeoutMs`, `end` to free what is held once the job's attempt is over, and `handOver` for an attempt whose run
   * goes on for the job's next one (the slot stays taken, its lease lapsing unless that attempt takes it over). The
   * clock stops while the job waits for a slot, whose length is other jobs' doing, and runs through the rest: a schema
   * read or an upload that never ends times out like the model.
   */
  turn(
    engine: { engineName: string; concurrency: number | undefined; timeoutMs: number },
    jobId: string,
    stopped: AbortSignal,
  ): { slot: EngineSlot | undefined; deadline: AbortSignal; end: () => Promise<void>; handOver: () => void } {
    const deadline = new AbortController();
    let left = engine.timeoutMs;
    let runningSince = 0;
    let timer: NodeJS.Timeout | undefined;
    let ended = false;
    const startClock = () => {
      if (ended) return;
      runningSince = performance.now();
      timer = setTimeout(
        () => deadline.abort(new DOMException('The engine did not answer in time.', 'TimeoutError')),
        left,
      );
    };
    const stopClock = () => {
      clearTimeout(timer);
      left -= performance.now() - runningSince;
    };
    const { concurrency } = engine;
    /** The slot this turn holds, or is taking; undefined before the first take and after each free. */
    let taking: Promise<HeldSlot> | undefined;
    /** The last free's release, which a take after it waits for: the same job's slot is not to be taken twice. */
    let released: Promise<void> = Promise.resolve();
    /** Whichever way: the slot freed, or left taken for the job's next attempt. */
    const letGo = (how: (held: HeldSlot) => Promise<void> | void): Promise<void> => {
      const held = taking;
      if (!held) return released;
      taking = undefined;
      released = held.then(how, () => undefined).catch(() => undefined);
      return released;
    };
    const free = () => letGo((held) => held.release());
    const stopClockForGood = () => {
      ended = true;
      clearTimeout(timer);
    };
    const slot: EngineSlot | undefined =
      concurrency === undefined
        ? undefined
        : {
            // A take after a free waits for a slot again: a ComfyUI prompt the server lost after it said it was done
            // is queued again, and runs on the GPU like any other.
            take: async () => {
              if (ended) return;
              if (taking) {
                await taking;
                return;
              }
              stopClock();
              const acquiring = released.then(() => this.acquire(engine.engineName, concurrency, jobId, stopped));
              taking = acquiring;
              try {
                await acquiring;
              } catch (error) {
                if (taking === acquiring) taking = undefined;
                throw error;
              } finally {
                startClock();
              }
            },
            free,
          };
    startClock();
    return {
      slot,
      deadline: deadline.signal,
      end: async () => {
        stopClockForGood();
        await free();
      },
      handOver: () => {
        stopClockForGood();
        void letGo((held) => held.leave());
      },
    };
  }

  private freedOrRetry(engine: string, signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.freed.off(engine, done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, RETRY_INTERVAL_MS);
      this.freed.once(engine, done);
      signal.addEventListener('abort', done, { once: true });
    });
  }
}
