import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Params } from 'nestjs-pino';
import { containsApiKey, maskApiKeys } from '../auth/api-key.js';
import type { AppConfig } from '../config/config.js';

const CLIENT_REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

/**
 * A client's own X-Request-Id is kept when it is sane, so one id follows a request across systems.
 * The first call for a request decides (main.ts calls it before any parser or route, the logger again).
 */
export function requestId(request: IncomingMessage, response: ServerResponse): string {
  const assigned = (request as IncomingMessage & { id?: unknown }).id;
  if (typeof assigned === 'string') return assigned;
  const incoming = request.headers['x-request-id'];
  // An id shaped like an API key would put a key into every log line of the request.
  const sane = typeof incoming === 'string' && CLIENT_REQUEST_ID.test(incoming) && !containsApiKey(incoming);
  const id = sane ? incoming : randomUUID();
  (request as IncomingMessage & { id?: string }).id = id;
  response.setHeader('X-Request-Id', id);
  return id;
}

export function loggerParams(config: AppConfig): Params {
  return {
    pinoHttp: {
      level: config.logLevel,
      genReqId: requestId,
      // Keys and anything that could carry one never reach a log line.
      redact: {
        paths: ['req.headers.authorization', 'req.headers.cookie', 'req.headers["idempotency-key"]', 'req.query'],
        remove: true,
      },
      serializers: {
        req: (req: { id: string; method: string; url: string }) => ({
          id: req.id,
          method: req.method,
          // A client that puts its key in the path must not get it logged either.
          url: maskApiKeys(req.url.split('?')[0]),
        }),
      },
      customLogLevel: (_req, res, err) => (err || res.statusCode >= 500 ? 'error' : 'info'),
      autoLogging: { ignore: (req) => req.url?.startsWith('/health/') ?? false },
    },
  };
}
