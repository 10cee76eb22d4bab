import {
  Global,
  Inject,
  Logger,
  Module,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { Redis } from 'ioredis';
import { AppConfig } from '../config/config.js';
import { FAIL_FAST_OPTIONS, ServiceRedis } from './redis.js';

/** The shared connection for the service's own keys (limits, idempotency, health); Bull keeps its own. */
export const REDIS = Symbol('REDIS');

class RedisLifecycle implements OnApplicationBootstrap, OnApplicationShutdown {
  constructor(@Inject(REDIS) private readonly redis: Redis) {}

  /** Bull loses jobs when Redis evicts keys under memory pressure; say so before it happens. */
  async onApplicationBootstrap(): Promise<void> {
    try {
      const [, policy] = (await this.redis.config('GET', 'maxmemory-policy')) as [string, string];
      if (policy !== 'noeviction') {
        new Logger('Redis').warn(
          `Redis maxmemory-policy is "${policy}": under memory pressure it may evict queued jobs. Set it to "noeviction".`,
        );
      }
    } catch {
      // Managed Redis services often forbid CONFIG; their policy cannot be checked from here.
    }
  }

  async onApplicationShutdown(): Promise<void> {
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}

@Global()
@Module({
  providers: [
    {
      provide: REDIS,
      inject: [AppConfig],
      useFactory: (config: AppConfig) => {
        const redis = new ServiceRedis(config.redisUrl, { ...FAIL_FAST_OPTIONS, keyPrefix: `${config.redisPrefix}:` });
        // Connection errors surface on the commands that need Redis; the event itself needs no handling.
        redis.on('error', () => {});
        return redis;
      },
    },
    RedisLifecycle,
  ],
  exports: [REDIS],
})
export class RedisModule {}
