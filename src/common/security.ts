import type { IncomingMessage, ServerResponse } from 'node:http';
import type { CorsOptions } from '@nestjs/common/interfaces/external/cors-options.interface.js';
import type { NestExpressApplication } from '@nestjs/platform-express';
import helmet from 'helmet';
import type { AppConfig } from '../config/config.js';

/** Where Swagger UI is served (service.ts). */
export const DOCS_ROUTE = 'docs';
/** Where the playground page is served (service.ts, built into dist/playground). */
export const PLAYGROUND_ROUTE = 'playground';
/** Where the queue board is served to admin keys (src/admin/queue-board.ts). */
export const QUEUE_BOARD_ROUTE = 'admin/queues';

type Middleware = (request: IncomingMessage, response: ServerResponse, next: (error?: unknown) => void) => void;

/**
 * The API answers JSON and images: nothing it sends may run script, load anything or be framed. `base-uri`,
 * `form-action` and `frame-ancestors` do not fall back to `default-src`, so they are named too.
 */
/** How long an idle keep-alive connection stays open: longer than the proxies in front keep theirs (see hardenHttp). */
const KEEP_ALIVE_MS = 65_000;

const API_POLICY = {
  'default-src': ["'none'"],
  'base-uri': ["'none'"],
  'form-action': ["'none'"],
  'frame-ancestors': ["'none'"],
};

/**
 * Swagger UI loads its scripts and stylesheet from the service itself and needs no inline or eval'd script.
 * Its page has inline `<style>` blocks and style attributes, its stylesheet data: images, and it previews image
 * responses of "Try it out" through blob: URLs. No `upgrade-insecure-requests` (Helmet's default): on a plain
 * HTTP deployment it would send the page's own assets to an https:// port that does not answer.
 */
const DOCS_POLICY = {
  'default-src': ["'self'"],
  'style-src': ["'self'", "'unsafe-inline'"],
  'img-src': ["'self'", 'data:', 'blob:'],
  'object-src': ["'none'"],
  'base-uri': ["'none'"],
  'form-action': ["'self'"],
  'frame-ancestors': ["'none'"],
};

/**
 * The playground is the service's own page: its script, stylesheet, API calls and result images all come from the
 * service; the user's picked files are previewed through blob: URLs. Nothing inline, nothing from elsewhere.
 */
const PLAYGROUND_POLICY = {
  'default-src': ["'self'"],
  'img-src': ["'self'", 'blob:'],
  'object-src': ["'none'"],
  'base-uri': ["'none'"],
  'form-action': ["'none'"],
  'frame-ancestors': ["'none'"],
};

/**
 * Bull Board's page: its scripts, stylesheets, images and API calls come from the service, under the `<base href>` it
 * sets to its own route. Its page has inline `<style>` blocks and style attributes, its scripts add styles of their
 * own as they render (so no list of hashes would do), and it loads the IBM Plex web
 * fonts from Google Fonts (a stylesheet from fonts.googleapis.com, the fonts from fonts.gstatic.com). Nothing inline
 * runs as script: the one inline `<script>` block is its configuration, as JSON, which is not run.
 */
const QUEUE_BOARD_POLICY = {
  'default-src': ["'none'"],
  'script-src': ["'self'"],
  'style-src': ["'self'", "'unsafe-inline'", 'https://fonts.googleapis.com'],
  'font-src': ['https://fonts.gstatic.com'],
  'img-src': ["'self'"],
  'connect-src': ["'self'"],
  'base-uri': ["'self'"],
  'form-action': ["'none'"],
  'frame-ancestors': ["'none'"],
};

/**
 * Helmet's headers (nosniff, HSTS, Referrer-Policy, ...) on every response, with a Content-Security-Policy
 * per kind of content. Media may be embedded by frontends on other origins (`<img>` is a no-cors request,
 * which `Cross-Origin-Resource-Policy: same-origin` would block).
 */
function securityHeaders(): Middleware {
  const withPolicy = (directives: Record<string, string[]>, crossOriginResourcePolicy?: { policy: 'cross-origin' }) =>
    headersOf(
      helmet({
        xFrameOptions: { action: 'deny' },
        contentSecurityPolicy: { useDefaults: false, directives },
        crossOriginResourcePolicy,
      }),
    );
  const api = withPolicy(API_POLICY);
  const docs = withPolicy(DOCS_POLICY);
  const playground = withPolicy(PLAYGROUND_POLICY);
  const queueBoard = withPolicy(QUEUE_BOARD_POLICY);
  const media = withPolicy(API_POLICY, { policy: 'cross-origin' });
  const under = (path: string, route: string) => path === `/${route}` || path.startsWith(`/${route}/`);
  return (request, response, next) => {
    const path = (request.url ?? '').split('?')[0];
    const headers = under(path, DOCS_ROUTE)
      ? docs
      : under(path, PLAYGROUND_ROUTE)
        ? playground
        : under(path, QUEUE_BOARD_ROUTE)
          ? queueBoard
          : path.startsWith('/media/')
            ? media
            : api;
    response.setHeaders(headers);
    next();
  };
}

/**
 * The headers a Helmet middleware sets. With static policies (no per-request nonce) they depend on nothing
 * in the request, so they are worked out once at boot instead of running Helmet's dozen middlewares on
 * every request.
 */
function headersOf(middleware: Middleware): Map<string, string> {
  const headers = new Map<string, string>();
  const recorder = {
    setHeader: (name: string, value: string) => headers.set(name, value),
    removeHeader: (name: string) => headers.delete(name),
  };
  middleware({ headers: {} } as IncomingMessage, recorder as unknown as ServerResponse, (error) => {
    if (error) throw new Error('security headers middleware failed', { cause: error });
  });
  return headers;
}

/**
 * CORS for the browser frontends named in CORS_ORIGINS, exact origins only; none named: undefined, and no
 * response carries a CORS header. Keys travel in `Authorization`, never in cookies, so credentialed
 * requests stay off.
 */
function corsOptions(origins: readonly string[]): CorsOptions | undefined {
  if (origins.length === 0) return undefined;
  return {
    origin: [...origins],
    methods: ['GET', 'POST', 'PATCH', 'DELETE'],
    // X-Request-Id: the service keeps a client's own id, so a frontend can follow one request into the logs. Prefer:
    // a frontend waits on a job (`Prefer: wait`) and reads whether it did (Preference-Applied).
    allowedHeaders: ['Authorization', 'Content-Type', 'Idempotency-Key', 'Prefer', 'X-Request-Id'],
    exposedHeaders: ['Location', 'Preference-Applied', 'Retry-After', 'X-Request-Id'],
    credentials: false,
    maxAge: 600,
  };
}

/**
 * Everything about HTTP that is not a route: which address a request comes from, security headers, CORS, and
 * how long an idle connection may stay open. Called before any other middleware but the request id.
 */
export function hardenHttp(app: NestExpressApplication, config: AppConfig): void {
  app.set('trust proxy', config.trustProxyHops);
  app.use(securityHeaders());
  const cors = corsOptions(config.corsOrigins);
  if (cors) app.enableCors(cors);
  const server = app.getHttpServer();
  // Node's own limit on receiving a request is 5 minutes; a client that sends nothing at all is cut off sooner.
  server.setTimeout(config.httpIdleTimeoutMs);
  // A proxy reuses its idle connections to the service for up to 60 s (nginx and ingress-nginx, AWS's ALB): closed
  // first by the service after Node's 5 s, one of them can carry the proxy's next request as it closes, a 502.
  server.keepAliveTimeout = KEEP_ALIVE_MS;
}
