import { Global, Module } from '@nestjs/common';
import { ConfigMetrics } from './config-metrics.js';
import { Metrics } from './metrics.js';
import { MetricsServer } from './metrics.server.js';

/** Metrics for every long-running role; served only when METRICS_PORT is set. */
@Global()
@Module({
  providers: [Metrics, MetricsServer, ConfigMetrics],
  exports: [Metrics],
})
export class MetricsModule {}
