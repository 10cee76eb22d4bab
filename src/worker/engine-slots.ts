import { Injectable } from '@nestjs/common';
import { inSpan, outsideTraces } from '../common/tracing.js';
import type { EngineSlot, PoolView } from '../engines/index.js';
import { EngineSlotQueue, type HeldSlot } from '../jobs/engine-slot-queue.js';

/**
 * Each job's turn on its remote engine: a slot of the engine's model server (EngineSlotQueue, counted across every
 * worker process, first come first served, a lease renewed while the job runs), and the engine's timeout.
 */
@Injectable()
export class EngineSlots {
  constructor(private readonly queue: EngineSlotQueue) {}

  /**
   * Resolves once the job holds a slot of `engine` (at most `concurrency` held at once), with the functions that free
   * it and that leave it held for the job's next attempt (its lease no longer renewed here); rejects with the signal's
   * reason if it fires first.
   */
  acquire(
    engine: string,
    concurrency: number,
    pool: PoolView | undefined,
    jobId: string,
    signal: AbortSignal,
  ): Promise<HeldSlot> {
    // One server named after the engine, or the pool's servers as they are now; while the job waits, a server that
    // comes back or is found is handed to the waiters at once.
    const servers = () => pool?.servers() ?? [{ name: engine, capacity: concurrency, healthy: true }];
    const stopFollowing = pool?.onChange(() => this.queue.update(engine, servers()));
    // One span for the wait, however long it is, without the queue's Redis calls under it: the wait is what counts.
    return inSpan('wait for engine slot', { attributes: { 'igs.engine.name': engine } }, () =>
      outsideTraces(() => this.queue.acquire(engine, servers(), jobId, signal)),
    ).finally(stopFollowing);
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
    engine: { engineName: string; concurrency: number | undefined; timeoutMs: number; pool?: PoolView },
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
              if (ended) return undefined;
              if (taking) return (await taking).server;
              stopClock();
              const acquiring = released.then(() =>
                this.acquire(engine.engineName, concurrency, engine.pool, jobId, stopped),
              );
              taking = acquiring;
              try {
                return (await acquiring).server;
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
}
