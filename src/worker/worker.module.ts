import { Module } from '@nestjs/common';
import { QueueModule } from '../generation/queue.module.js';
import { EngineRegistry } from './engines/engine-registry.js';
import { GenerationProcessor } from './generation.processor.js';
import { JobOutcomes } from './job-outcomes.js';
import { Reconciler } from './reconciler.js';

@Module({
  imports: [QueueModule],
  providers: [EngineRegistry, GenerationProcessor, JobOutcomes, Reconciler],
})
export class WorkerModule {}
