import { Controller, Get, Inject, Res, ServiceUnavailableException } from '@nestjs/common';
import { HealthCheck, HealthCheckService, HealthIndicatorService, TypeOrmHealthIndicator } from '@nestjs/terminus';
import type { Response } from 'express';
import type { Redis } from 'ioredis';
import { Public } from '../common/public.js';
import { EngineRegistry } from '../engines/index.js';
import { REDIS } from '../redis/redis.module.js';

const CHECK_TIMEOUT_MS = 1500;

@Public()
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly db: TypeOrmHealthIndicator,
    private readonly indicators: HealthIndicatorService,
    @Inject(REDIS) private readonly redis: Redis,
    private readonly engines: EngineRegistry,
  ) {}

  /** The process is up; says nothing of its dependencies, so a restart never follows a database outage. */
  @Get('live')
  @HealthCheck()
  live() {
    return this.health.check([]);
  }

  /** 503 carries terminus's report, not a problem, so an operator sees which dependency is down. */
  @Get('ready')
  @HealthCheck()
  async ready(@Res({ passthrough: true }) response: Response) {
    const [report, engines] = await Promise.all([
      this.dependencies(response) as Promise<object>,
      this.engines.probe(CHECK_TIMEOUT_MS),
    ]);
    if (Object.keys(engines).length === 0) return report;
    // Listed apart from terminus's indicators: a model server that is down must not take the API out of rotation.
    const listed: Record<string, { kind: string; status: 'up' | 'down' }> = {};
    for (const [name, { kind, up }] of Object.entries(engines)) listed[name] = { kind, status: up ? 'up' : 'down' };
    return { ...report, engines: listed };
  }

  private dependencies(response: Response) {
    return this.health
      .check([
        () => this.db.pingCheck('database', { timeout: CHECK_TIMEOUT_MS }),
        () =>
          this.indicators
            .check('queue')
            .attempt(async () => {
              await this.redis.ping();
            })
            .withTimeout(CHECK_TIMEOUT_MS),
      ])
      .catch((error: unknown) => {
        if (!(error instanceof ServiceUnavailableException)) throw error;
        response.status(503);
        return error.getResponse();
      });
  }
}
