import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { QueueModule } from '../queue/queue.module.js';
import { HistoryCount } from './history-count.entity.js';
import { HistoryItem } from './history-item.entity.js';
import { HistoryRepository } from './history.repository.js';
import { JobEvents } from './job-events.js';
import { JobLifecycle } from './job-lifecycle.js';
import { JobProgress } from './job-progress.js';
import { JobWaits } from './job-waits.js';
import { PendingAge } from './pending-age.js';

export const JOB_ENTITIES = [HistoryItem, HistoryCount];

/** History items as jobs: their table, their lifecycle and its events, for the API and the worker alike. */
@Module({
  imports: [TypeOrmModule.forFeature(JOB_ENTITIES), QueueModule],
  providers: [HistoryRepository, JobLifecycle, JobEvents, JobProgress, JobWaits, PendingAge],
  exports: [HistoryRepository, JobLifecycle, JobEvents, JobProgress, JobWaits, QueueModule],
})
export class JobsModule {}
