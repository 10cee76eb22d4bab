import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { EnginesModule } from '../engines/index.js';
import { JobsModule } from '../jobs/jobs.module.js';
import { DependencyChecks } from './dependency-checks.js';
import { DependencyMetrics } from './dependency-metrics.js';
import { HealthController } from './health.controller.js';

@Module({
  imports: [TerminusModule.forRoot({ logger: false }), EnginesModule, JobsModule],
  controllers: [HealthController],
  providers: [DependencyChecks, DependencyMetrics],
})
export class HealthModule {}
