import { BullModule } from '@nestjs/bull';
import { Module, type OnApplicationShutdown } from '@nestjs/common';
import { Redis, type RedisOptions } from 'ioredis';
import { outsideTraces } from '../common/tracing.js';
import { AppConfig } from '../config/config.js';
import { FAIL_FAST_OPTIONS } from '../redis/redis.js';
import { JobQueue } from './job-queue.js';
import { QueueDepth } from './queue-depth.js';
import { GENERATION_QUEUE, WEBHOOK_BACKOFF, WEBHOOK_QUEUE } from './queues.js';
import { WebhookQueue } from './webhook-queue.js';

/**
 * Bull's Redis connections; Bull does not close connections it did not create itself. Bull opens them on a queue's
 * first use, within the request or job that used it: they are opened outside its trace.
 */
class QueueConnections implements OnApplicationShutdown {
  private readonly all = new Set<Redis>();

  create(type: 'client' | 'subscriber' | 'bclient', url: string, options: RedisOptions): Redis {
    const connection = outsideTraces(() =>
      type === 'client'
        ? // Adds and job updates fail at once while Redis is down, so the API answers 503 in time.
          new Redis(url, { ...options, ...FAIL_FAST_OPTIONS, commandTimeout: undefined })
        : // The blocking and subscriber connections wait and reconnect for as long as it takes.
          new Redis(url, { ...options, maxRetriesPerRequest: null, enableReadyCheck: false }),
    );
    this.all.add(connection);
    return connection;
  }

  onApplicationShutdown(): void {
    for (const connection of this.all) connection.disconnect();
  }
}

@Module({ providers: [QueueConnections], exports: [QueueConnections] })
class QueueConnectionsModule {}

@Module({
  imports: [
    BullModule.forRootAsync({
      imports: [QueueConnectionsModule],
      inject: [AppConfig, QueueConnections],
      useFactory: (config: AppConfig, connections: QueueConnections) => ({
        prefix: `${config.redisPrefix}:bull`,
        createClient: (type, options) => connections.create(type, config.redisUrl, options ?? {}),
        settings: {
          lockDuration: config.jobLockMs,
          lockRenewTime: Math.floor(config.jobLockMs / 2),
          stalledInterval: config.jobStalledCheckMs,
          maxStalledCount: 2,
          backoffStrategies: {
            [WEBHOOK_BACKOFF]: (attemptsMade: number) =>
              config.webhookRetryDelaysMs[Math.min(attemptsMade, config.webhookRetryDelaysMs.length) - 1] ?? 0,
          },
        },
      }),
    }),
    BullModule.registerQueue({ name: GENERATION_QUEUE }, { name: WEBHOOK_QUEUE }),
  ],
  providers: [JobQueue, WebhookQueue, QueueDepth],
  exports: [JobQueue, WebhookQueue],
})
export class QueueModule {}
