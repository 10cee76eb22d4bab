import { Controller, Get, Res, ServiceUnavailableException } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import type { Response } from 'express';
import { Draining } from '../common/draining.js';
import { Public } from '../common/public.js';
import { DependencyChecks } from './dependency-checks.js';

@Public()
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly checks: DependencyChecks,
    private readonly draining: Draining,
  ) {}

  /** The process is up; says nothing of its dependencies, so a restart never follows a database outage. */
  @Get('live')
  @HealthCheck()
  live() {
    return this.health.check([]);
  }

  /**
   * 503 carries terminus's report, not a problem, so an operator sees which dependency is down. From SIGTERM on,
   * `shutting_down` (terminus's status for it) with 503: a balancer that still reaches this process over a connection
   * kept alive takes it out of rotation while it drains.
   */
  @Get('ready')
  @HealthCheck()
  async ready(@Res({ passthrough: true }) response: Response) {
    const [dependencies, engines] = await Promise.all([
      this.dependencies(response) as Promise<{ status: string }>,
      this.checks.engineServers(),
    ]);
    const shuttingDown = this.draining.signal.aborted;
    if (shuttingDown) response.status(503);
    const report = shuttingDown ? { ...dependencies, status: 'shutting_down' } : dependencies;
    if (Object.keys(engines).length === 0) return report;
    // Listed apart from terminus's indicators: a model server that is down must not take the API out of rotation.
    const listed: Record<string, { kind: string; status: Status; servers?: Record<string, { status: Status }> }> = {};
    for (const [name, { kind, up, servers }] of Object.entries(engines)) {
      listed[name] = { kind, status: status(up) };
      // A pool's servers, each by its address: one that is down is the operator's to see while the others work on.
      if (servers) {
        listed[name].servers = Object.fromEntries(
          Object.entries(servers).map(([server, serverUp]) => [server, { status: status(serverUp) }]),
        );
      }
    }
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

type Status = 'up' | 'down';

function status(up: boolean): Status {
  return up ? 'up' : 'down';
}
