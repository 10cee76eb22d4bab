import { EventEmitter } from 'node:events';
import { Inject, Injectable, Logger, type OnApplicationShutdown } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { outsideTraces } from '../common/tracing.js';
import { ServiceUnavailableError } from '../common/unavailable.js';
import { AppConfig } from '../config/config.js';
import { REDIS } from '../redis/redis.module.js';
import type { JobStatus } from './history-item.entity.js';

/**
 * A change of a history item, announced by `JobLifecycle` once the change is committed: `created` (pending),
 * `started` (a worker began running it; still pending), `completed`, `failed` (final), `deleted` (gone).
 */
export interface JobEvent {
  kind: 'created' | 'started' | 'completed' | 'failed' | 'deleted';
  historyItemId: string;
  userId: string;
  status: JobStatus;
}

/** How long a first watch may wait for the fan-out's Redis connection before the request is answered 503. */
const LISTEN_TIMEOUT_MS = 2000;

/** A running job's progress moved (0 to 1). Only watchers hear it: nothing must happen once per progress tick. */
export interface ProgressEvent {
  kind: 'progress';
  historyItemId: string;
  userId: string;
  progress: number;
}

/**
 * A job of `engine`'s line started or left it: the jobs behind it moved up (`QueueLine`). Every watcher hears it, at
 * most about once a second per engine and process; a watcher of a queued job reads its new position.
 */
export interface LineMovedEvent {
  kind: 'line';
  engine: string;
}

/**
 * What a watcher is told: a change, a running job's progress, a line that moved, or `resync` after the fan-out was
 * cut off and changes may have been missed.
 */
export type WatchedEvent = JobEvent | ProgressEvent | LineMovedEvent | { kind: 'resync' };

/** Whose changes a watcher follows: one item's, or all of one user's. */
export type WatchScope = { historyItemId: string } | { userId: string };

/**
 * The lifecycle's announcements, in two reaches:
 *
 * - `subscribe`: in the process that made the change, once per change (what must happen exactly once, such as
 *   queueing a webhook, subscribes here);
 * - `watch`: in every process, whichever process made the change (event streams and waiting requests on any API
 *   replica watch here). Changes are fanned out through one Redis channel; a process starts listening on its first
 *   watch.
 */
@Injectable()
export class JobEvents implements OnApplicationShutdown {
  private readonly logger = new Logger(JobEvents.name);
  private readonly local = new EventEmitter();
  private readonly byItem = new Map<string, Set<(event: WatchedEvent) => void>>();
  private readonly byUser = new Map<string, Set<(event: WatchedEvent) => void>>();
  private readonly channel: string;
  private subscriber?: Redis;
  private listening?: Promise<void>;

  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    config: AppConfig,
  ) {
    this.channel = `${config.redisPrefix}:job-events`;
    // Every open event stream and waiting request watches; a busy API replica has thousands.
    this.local.setMaxListeners(0);
  }

  /** Listeners run after the change and cannot undo it: what one throws is logged, not passed to the lifecycle. */
  subscribe(listener: (event: JobEvent) => void | Promise<void>): () => void {
    const guarded = (event: JobEvent) => {
      void Promise.resolve()
        .then(() => listener(event))
        .catch((error: unknown) => this.logger.warn({ err: error, event }, 'a job event listener failed'));
    };
    this.local.on('event', guarded);
    return () => this.local.off('event', guarded);
  }

  /**
   * Calls `listener` for every change in `scope`, made by any process, until the returned function is called. Resolves
   * once the fan-out listens, so that a change committed after it resolves is not missed.
   */
  async watch(scope: WatchScope, listener: (event: WatchedEvent) => void): Promise<() => void> {
    const [index, key] = 'historyItemId' in scope ? [this.byItem, scope.historyItemId] : [this.byUser, scope.userId];
    const listeners = index.get(key) ?? new Set();
    index.set(key, listeners);
    listeners.add(listener);
    const unwatch = () => {
      listeners.delete(listener);
      if (listeners.size === 0 && index.get(key) === listeners) index.delete(key);
    };
    try {
      await this.listen();
    } catch (error) {
      unwatch();
      throw error;
    }
    return unwatch;
  }

  announce(event: JobEvent): void {
    this.local.emit('event', event);
    // Watchers elsewhere miss this change while Redis is down; they resync when the fan-out reconnects.
    this.redis.publish(this.channel, JSON.stringify(event)).catch((error: unknown) => {
      this.logger.warn({ err: error, event }, 'a job event was not fanned out');
    });
  }

  /**
   * Calls `listener` for each progress report passed on in this process (the worker running the job), as `subscribe`
   * does for changes.
   */
  subscribeProgress(listener: (event: ProgressEvent) => void | Promise<void>): () => void {
    const guarded = (event: ProgressEvent) => {
      void Promise.resolve()
        .then(() => listener(event))
        .catch((error: unknown) => this.logger.warn({ err: error, event }, 'a progress listener failed'));
    };
    this.local.on('progress', guarded);
    return () => this.local.off('progress', guarded);
  }

  /** Fanned out to watchers in every process, as changes are; lost while Redis is down (the next one follows). */
  announceProgress(event: Omit<ProgressEvent, 'kind'>): Promise<unknown> {
    const progress: ProgressEvent = { kind: 'progress', ...event };
    this.local.emit('progress', progress);
    return this.redis.publish(this.channel, JSON.stringify(progress));
  }

  /** Fanned out to every watcher in every process; lost while Redis is down (the next move follows). */
  announceLineMoved(engine: string): Promise<unknown> {
    return this.redis.publish(this.channel, JSON.stringify({ kind: 'line', engine } satisfies LineMovedEvent));
  }

  async onApplicationShutdown(): Promise<void> {
    await this.subscriber?.quit().catch(() => this.subscriber?.disconnect());
  }

  /** Resolves once the fan-out's channel is subscribed; a Redis that does not answer in time is an outage (503). */
  private async listen(): Promise<void> {
    // The first watcher opens the fan-out, which then serves them all: it is no part of that watcher's trace.
    this.listening ??= outsideTraces(() => this.startListening());
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new ServiceUnavailableError('redis')), LISTEN_TIMEOUT_MS);
    });
    try {
      await Promise.race([this.listening, timeout]);
      // After a reconnect the connection subscribes again before it is ready.
      const subscriber = this.subscriber!;
      if (subscriber.status !== 'ready') {
        await Promise.race([new Promise((resolve) => subscriber.once('ready', resolve)), timeout]);
      }
    } finally {
      clearTimeout(timer);
    }
  }

  private async startListening(): Promise<void> {
    // A connection of its own: a subscribed connection can do nothing else. It waits for Redis as long as it takes
    // and subscribes again after every reconnect.
    const subscriber = this.redis.duplicate({ keyPrefix: '', maxRetriesPerRequest: null, enableOfflineQueue: true });
    this.subscriber = subscriber;
    subscriber.on('error', () => {});
    subscriber.on('message', (_channel: string, message: string) => {
      const event = JSON.parse(message) as JobEvent | ProgressEvent | LineMovedEvent;
      if (event.kind === 'line') this.dispatchToAll(event);
      else this.dispatch(event);
    });
    let connectedBefore = false;
    subscriber.on('ready', () => {
      if (connectedBefore) this.dispatchToAll({ kind: 'resync' });
      connectedBefore = true;
    });
    await subscriber.subscribe(this.channel);
  }

  private dispatch(event: JobEvent | ProgressEvent): void {
    for (const listener of [...(this.byItem.get(event.historyItemId) ?? [])]) listener(event);
    for (const listener of [...(this.byUser.get(event.userId) ?? [])]) listener(event);
  }

  private dispatchToAll(event: WatchedEvent): void {
    for (const listeners of [...this.byItem.values(), ...this.byUser.values()]) {
      for (const listener of [...listeners]) listener(event);
    }
  }
}
