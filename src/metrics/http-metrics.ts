import type { NextFunction, Request, Response } from 'express';
import type { Metrics } from './metrics.js';

/**
 * The route label of requests no route of ours took: unknown paths (Nest answers those from a wildcard route),
 * static files, bodies refused before routing.
 */
export const UNMATCHED_ROUTE = 'unmatched';

/**
 * The route template that answered (`/user/generation-history/:id`), never the URL with its ids. A request a mounted
 * app answered without a route template of its own (the queue board's page and static files) is labelled by the mount.
 */
export function routeLabel(request: Pick<Request, 'baseUrl' | 'route'>): string {
  // The mount as the client spelt it: Express matches it in any case, so each spelling would be a series of its own.
  const mount = request.baseUrl.toLowerCase();
  const path = (request.route as { path?: unknown } | undefined)?.path;
  if (typeof path === 'string' && !path.includes('*')) return `${mount}${path}`;
  return mount || UNMATCHED_ROUTE;
}

/**
 * Times every request from its arrival. Installed ahead of the body parsers, so requests they refuse count
 * too; the route is read when the answer is finished, after routing has run.
 */
export function httpMetrics(metrics: Metrics) {
  return (request: Request, response: Response, next: NextFunction): void => {
    const started = process.hrtime.bigint();
    response.once('finish', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      metrics.observeHttp(request.method, routeLabel(request), response.statusCode, seconds);
    });
    next();
  };
}
