import { Controller, Get, Res, ServiceUnavailableException } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import type { Response } from 'express';
import { Public } from '../common/public.js';
import { DependencyChecks } from './dependency-checks.js';

@Public()
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly checks: DependencyChecks,
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
      this.checks.engineServers(),
    ]);
    if (Object.keys(engines).length === 0) return report;
    // Listed apart from terminus's indicators: a model server that is down must not take the API out of rotation.
    const listed: Record<string, { kind: string; status: 'up' | 'down' }> = {};
    for (const [name, { kind, up }] of Object.entries(engines)) listed[name] = { kind, status: up ? 'up' : 'down' };
    return { ...report, engines: listed };
  }

  private dependencies(response: Response) {
    return this.health.check([() => this.checks.database(), () => this.checks.queue()]).catch((error: unknown) => {
      if (!(error instanceof ServiceUnavailableException)) throw error;
      response.status(503);
      return error.getResponse();
    });
  }
}
