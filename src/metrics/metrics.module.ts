import { Global, Module } from '@nestjs/common';
import { QueueModule } from '../generation/queue.module.js';
import { Metrics } from './metrics.js';
import { MetricsServer } from './metrics.server.js';
import { QueueDepth } from './queue-depth.js';

/** Metrics for every long-running role; served only when METRICS_PORT is set. */
@Global()
@Module({
  imports: [QueueModule],
  providers: [Metrics, QueueDepth, MetricsServer],
  exports: [Metrics],
})
export class MetricsModule {}
