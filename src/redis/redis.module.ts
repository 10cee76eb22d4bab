import { Global, Inject, Module, type OnApplicationShutdown } from '@nestjs/common';
import { Redis } from 'ioredis';
import { AppConfig } from '../config/config.js';
import { FAIL_FAST_OPTIONS } from './redis.js';

/** The shared connection for the service's own keys (limits, idempotency, health); Bull keeps its own. */
export const REDIS = Symbol('REDIS');

class RedisCloser implements OnApplicationShutdown {
  constructor(@Inject(REDIS) private readonly redis: Redis) {}

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
        const redis = new Redis(config.redisUrl, { ...FAIL_FAST_OPTIONS, keyPrefix: `${config.redisPrefix}:` });
        // Connection errors surface on the commands that need Redis; the event itself needs no handling.
        redis.on('error', () => {});
        return redis;
      },
    },
    RedisCloser,
  ],
  exports: [REDIS],
})
export class RedisModule {}
