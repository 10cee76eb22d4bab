import type { Request } from 'express';
import { routeLabel, UNMATCHED_ROUTE } from './http-metrics.js';

function requestOn(route: unknown, baseUrl = ''): Pick<Request, 'baseUrl' | 'route'> {
  return { baseUrl, route } as Pick<Request, 'baseUrl' | 'route'>;
}

describe('routeLabel', () => {
  it('is the template of the route that answered, with its parameters unfilled', () => {
    expect(routeLabel(requestOn({ path: '/user/generation-history/:id' }))).toBe('/user/generation-history/:id');
  });

  it('includes the path the router is mounted at', () => {
    expect(routeLabel(requestOn({ path: '/:id/:file' }, '/media'))).toBe('/media/:id/:file');
  });

  it('is "unmatched" when no route took the request', () => {
    expect(routeLabel(requestOn(undefined))).toBe(UNMATCHED_ROUTE);
  });

  it('is the mount of an app that answered without a route template (the queue board, its files)', () => {
    expect(routeLabel(requestOn(undefined, '/admin/queues'))).toBe('/admin/queues');
    expect(routeLabel(requestOn({ path: ['/', '/queue/:queueName'] }, '/admin/queues'))).toBe('/admin/queues');
  });

  it('is one label whatever the case the client spells the mount in, which Express matches in any case', () => {
    expect(routeLabel(requestOn(undefined, '/ADMIN/Queues'))).toBe('/admin/queues');
    expect(routeLabel(requestOn({ path: '/:id/:file' }, '/Media'))).toBe('/media/:id/:file');
  });

  it('is "unmatched" for the catch-all route that answers unknown paths', () => {
    expect(routeLabel(requestOn({ path: '{/*splat}' }))).toBe(UNMATCHED_ROUTE);
  });
});
