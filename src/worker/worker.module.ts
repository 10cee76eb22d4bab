import { Module } from '@nestjs/common';
import { JobsModule } from '../jobs/jobs.module.js';
import { EnginesModule } from '../engines/index.js';
import { EngineSlots } from './engine-slots.js';
import { GenerationProcessor } from './generation.processor.js';
import { Reconciler } from './reconciler.js';
import { ResultLeftovers } from './result-leftovers.js';
import { RetentionSweep } from './retention.js';
import { RunningJobs } from './running-jobs.js';

@Module({
  imports: [JobsModule, EnginesModule],
  providers: [EngineSlots, GenerationProcessor, Reconciler, ResultLeftovers, RetentionSweep, RunningJobs],
})
export class WorkerModule {}
