import { type DynamicModule, Module } from '@nestjs/common';
import { APP_FILTER, APP_PIPE } from '@nestjs/core';
import { AuthModule } from './auth/auth.module.js';
import { CatalogModule } from './catalog/catalog.module.js';
import { ProblemFilter } from './common/problem.filter.js';
import { TraceFlush } from './common/tracing.js';
import { validationPipe } from './common/validation.js';
import type { AppConfig } from './config/config.js';
import { ConfigModule } from './config/config.module.js';
import { ContractModule } from './contract/contract.module.js';
import { DrainingModule } from './common/draining.module.js';
import { DatabaseModule } from './database/database.module.js';
import { GenerationModule } from './generation/generation.module.js';
import { HealthModule } from './health/health.module.js';
import { HistoryModule } from './history/history.module.js';
import { MediaApiModule } from './media/media-api.module.js';
import { MediaModule } from './media/media.module.js';
import { MediaUrlsModule } from './media/media-urls.module.js';
import { MetricsModule } from './metrics/metrics.module.js';
import { RedisModule } from './redis/redis.module.js';
import { WebhooksModule } from './webhooks/webhooks.module.js';
import { WorkerModule } from './worker/worker.module.js';

@Module({})
export class AppModule {
  /** The API and the worker share one image and one module tree; ROLE picks which halves boot. */
  static forRole(config: AppConfig): DynamicModule {
    const foundation = [ConfigModule.forRoot(config), DrainingModule.forRole({ api: config.runsApi }), DatabaseModule];
    // Booting the database module applies the pending migrations: all that this role is for.
    if (config.role === 'migrate') return { module: AppModule, imports: foundation };
    const api = config.runsApi
      ? [AuthModule, CatalogModule, ContractModule, GenerationModule, HistoryModule, MediaApiModule]
      : [];
    const worker = config.runsWorker ? [WorkerModule] : [];
    const webhooks = WebhooksModule.forRole({ api: config.runsApi });
    return {
      module: AppModule,
      imports: [
        ...foundation,
        RedisModule,
        HealthModule,
        MediaModule,
        MediaUrlsModule,
        MetricsModule,
        ...api,
        ...worker,
        webhooks,
      ],
      providers: [
        { provide: APP_FILTER, useClass: ProblemFilter },
        { provide: APP_PIPE, useFactory: validationPipe },
        TraceFlush,
      ],
    };
  }
}
