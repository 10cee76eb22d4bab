import { EventEmitter } from 'node:events';
import { Injectable, Logger } from '@nestjs/common';
import type { JobStatus } from './history-item.entity.js';

/**
 * A change of a history item, announced by `JobLifecycle` once the change is committed: `created` (pending),
 * `completed`, `failed` (final), `deleted` (gone).
 */
export interface JobEvent {
  kind: 'created' | 'completed' | 'failed' | 'deleted';
  historyItemId: string;
  userId: string;
  status: JobStatus;
}

/** The lifecycle's announcements, in this process; subscribers deliver them onwards (push, for one). */
@Injectable()
export class JobEvents {
  private readonly logger = new Logger(JobEvents.name);
  private readonly emitter = new EventEmitter();

  /** Listeners run after the change and cannot undo it: what one throws is logged, not passed to the lifecycle. */
  subscribe(listener: (event: JobEvent) => void | Promise<void>): () => void {
    const guarded = (event: JobEvent) => {
      void Promise.resolve()
        .then(() => listener(event))
        .catch((error: unknown) => this.logger.warn({ err: error, event }, 'a job event listener failed'));
    };
    this.emitter.on('event', guarded);
    return () => this.emitter.off('event', guarded);
  }

  announce(event: JobEvent): void {
    this.emitter.emit('event', event);
  }
}
