import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { EnginesModule } from '../engines/index.js';
import { QueueModule } from '../queue/queue.module.js';
import { EngineRuns } from './engine-runs.js';
import { EngineSlotQueue } from './engine-slot-queue.js';
import { HistoryCount } from './history-count.entity.js';
import { HistoryItem } from './history-item.entity.js';
import { HistoryRepository } from './history.repository.js';
import { JobEvents } from './job-events.js';
import { JobLifecycle } from './job-lifecycle.js';
import { JobProgress } from './job-progress.js';
import { JobWaits } from './job-waits.js';
import { OutputLease } from './output-lease.js';
import { PendingAge } from './pending-age.js';
import { QueueLine } from './queue-line.js';
import { UsageMonth } from './usage-month.entity.js';

export const JOB_ENTITIES = [HistoryItem, HistoryCount, UsageMonth];

/** History items as jobs: their table, their lifecycle and its events, for the API and the worker alike. */
@Module({
  imports: [TypeOrmModule.forFeature(JOB_ENTITIES), QueueModule, EnginesModule],
  providers: [
    HistoryRepository,
    EngineRuns,
    EngineSlotQueue,
    JobLifecycle,
    JobEvents,
    JobProgress,
    JobWaits,
    OutputLease,
    PendingAge,
    QueueLine,
  ],
  exports: [
    HistoryRepository,
    EngineRuns,
    EngineSlotQueue,
    JobLifecycle,
    JobEvents,
    JobProgress,
    JobWaits,
    QueueModule,
    QueueLine,
  ],
})
export class JobsModule {}
