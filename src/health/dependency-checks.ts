import { Inject, Injectable } from '@nestjs/common';
import { type HealthCheckAttempt, HealthIndicatorService, TypeOrmHealthIndicator } from '@nestjs/terminus';
import type { Redis } from 'ioredis';
import { EngineRegistry, type ServerState } from '../engines/index.js';
import { REDIS } from '../redis/redis.module.js';

/** Long enough for a loaded server, short enough for an orchestrator's probe and a scrape to get their answer. */
const CHECK_TIMEOUT_MS = 1500;

/** What the readiness probe and the metrics ask of the process's dependencies, each bounded by one timeout. */
@Injectable()
export class DependencyChecks {
  constructor(
    private readonly db: TypeOrmHealthIndicator,
    private readonly indicators: HealthIndicatorService,
    @Inject(REDIS) private readonly redis: Redis,
    private readonly engines: EngineRegistry,
  ) {}

  database(): HealthCheckAttempt<'database'> {
    return this.db.pingCheck('database', { timeout: CHECK_TIMEOUT_MS });
  }

  queue(): HealthCheckAttempt<'queue'> {
    return this.indicators
      .check('queue')
      .attempt(async () => {
        await this.redis.ping();
      })
      .withTimeout(CHECK_TIMEOUT_MS);
  }

  /** Each remote model server by name, with whether it answered (a pool: one of its servers, and each). */
  engineServers(): Promise<Record<string, ServerState>> {
    return this.engines.probe(CHECK_TIMEOUT_MS);
  }
}
