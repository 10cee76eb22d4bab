import type { DynamicModule, INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { randomUUID } from 'node:crypto';
import { TypeOrmModule } from '@nestjs/typeorm';
import { AUTH_ENTITIES } from '../../src/auth/auth.module.js';
import { DrainingModule } from '../../src/common/draining.module.js';
import { AppConfig } from '../../src/config/config.js';
import { ConfigModule } from '../../src/config/config.module.js';
import { DatabaseModule } from '../../src/database/database.module.js';
import { JobLifecycle } from '../../src/jobs/job-lifecycle.js';
import { JobsModule } from '../../src/jobs/jobs.module.js';
import { INPUT_STORE, inputKey } from '../../src/media/media.js';
import type { ObjectStore } from '../../src/media/object-store.js';
import { MediaModule } from '../../src/media/media.module.js';
import { Metrics } from '../../src/metrics/metrics.js';
import { RedisModule } from '../../src/redis/redis.module.js';
import { ResultLeftovers } from '../../src/worker/result-leftovers.js';

/**
 * The job lifecycle as a worker runs it, in the test's process, with the real repository, queues, Redis and storage
 * (`settings` over the environment's: STORAGE=s3 and the rest), and the media store's sweep; no processor takes jobs.
 */
export async function bootLifecycle(settings: Record<string, string>): Promise<INestApplicationContext> {
  const config = new AppConfig({ ...settings, ROLE: 'worker' });
  const metrics: DynamicModule = {
    module: class TestMetricsModule {},
    global: true,
    providers: [Metrics],
    exports: [Metrics],
  };
  const root: DynamicModule = {
    module: class LifecycleUnderTest {},
    imports: [
      ConfigModule.forRoot(config),
      DatabaseModule,
      DrainingModule.forRole({ api: false }),
      RedisModule,
      MediaModule,
      metrics,
      JobsModule,
      // The users items belong to.
      TypeOrmModule.forFeature(AUTH_ENTITIES),
    ],
    providers: [ResultLeftovers],
  };
  return NestFactory.createApplicationContext(root, { logger: false, abortOnError: false });
}

/** A pending item of `userId`'s as a creation leaves it, in the booted lifecycle: its input stored, its row written, its job queued. */
export async function pendingItem(app: INestApplicationContext, userId: string): Promise<string> {
  const id = randomUUID();
  const key = inputKey(id, 'image');
  await app.get<ObjectStore>(INPUT_STORE).put(key, Buffer.from(`the photo of ${id}`));
  const input = { key, format: 'jpeg' as const, width: 64, height: 64, bytes: 10 };
  const item = { id, userId, tool: 'default', generationType: 'default', inputs: { image: input }, texts: {} };
  if (
    !(await app
      .get(JobLifecycle)
      .accept({ ...item, webhookUrl: null, webhookEvents: null, seed: null, numOutputs: 1 }, 1000))
  ) {
    throw new Error('the item was refused');
  }
  return id;
}
