import { Module } from '@nestjs/common';
import { JobsModule } from '../jobs/jobs.module.js';
import { EngineRegistry } from './engines/engine-registry.js';
import { GenerationProcessor } from './generation.processor.js';
import { Reconciler } from './reconciler.js';

@Module({
  imports: [JobsModule],
  providers: [EngineRegistry, GenerationProcessor, Reconciler],
})
export class WorkerModule {}
