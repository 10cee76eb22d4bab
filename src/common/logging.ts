import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { LoggerService } from '@nestjs/common';
import { type Level, type Logger as Pino, pino } from 'pino';
import pretty from 'pino-pretty';
import { containsApiKey, maskApiKeys } from './api-key.js';
import { traceIds } from './tracing.js';
import type { AppConfig } from '../config/config.js';

const CLIENT_REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

type Request = IncomingMessage & { id?: string };

/** A client's own X-Request-Id is kept when it is sane, so one id follows a request across systems. */
export function assignRequestId(request: Request, response: ServerResponse): void {
  const incoming = request.headers['x-request-id'];
  // An id shaped like an API key would put a key into every log line of the request.
  const sane = typeof incoming === 'string' && CLIENT_REQUEST_ID.test(incoming) && !containsApiKey(incoming);
  const id = sane ? incoming : randomUUID();
  request.id = id;
  response.setHeader('X-Request-Id', id);
}

/**
 * Everything in the process logs through this one instance, on stdout: JSON lines for log collectors, or, for a
 * person at a terminal (LOG_FORMAT=auto and stdout a TTY, or LOG_FORMAT=pretty), one readable line per event.
 */
export function createRootLogger(
  config: Pick<AppConfig, 'logLevel' | 'logFormat'>,
  stdoutIsTerminal = process.stdout.isTTY === true,
  destination: NodeJS.WritableStream = process.stdout,
): Pino {
  const readable = config.logFormat === 'pretty' || (config.logFormat === 'auto' && stdoutIsTerminal);
  // A line written in a traced request or job names its trace: from a log line to the whole trace, and back.
  const options = { level: config.logLevel, mixin: traceIds };
  if (!readable) return pino(options, destination);
  // In this thread, not pino's transport thread: the lines stay in order with what the process prints itself.
  const stream = pretty({
    destination,
    colorize: stdoutIsTerminal,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname,context',
    messageFormat: '{if context}[{context}] {end}{msg}',
    sync: true,
  });
  return pino(options, stream);
}

/** Answers the service itself could not finish sending; see `abortFailedResponse`. */
const FAILED_TO_SEND = new WeakSet<ServerResponse>();

/**
 * Cuts off an answer the service could not finish (its source failed after the headers went out), so the client sees
 * a broken connection rather than a short body, and the request log reports it as an error. An answer cut off by a
 * client that went away is no failure of the service and is not passed here.
 */
export function abortFailedResponse(response: ServerResponse): void {
  FAILED_TO_SEND.add(response);
  response.destroy();
}

/**
 * The first middleware (service.ts), so every answer carries an X-Request-Id, also those made before routing
 * (an unparsable body, Swagger UI).
 *
 * It logs one line per answered request when the response is finished or the connection is gone, naming
 * the request by id, method and path only. An error is a 5xx or an answer the service failed to send
 * (`abortFailedResponse`); a client that went away before its answer was whole is a warning, so the error
 * alerts count only the service's own failures. No headers, no query string (either may carry a key or a media
 * URL's signature, and a key a client put into the path is masked). Health probes are not logged. No child logger per request: a
 * request costs a listener and, only when `info` is enabled, one line.
 */
export function requestLogging(logger: Pino) {
  return (request: Request, response: ServerResponse, next: () => void): void => {
    assignRequestId(request, response);
    if (request.url?.startsWith('/health/')) return next();
    const started = performance.now();
    response.once('close', () => {
      // An event stream ends when its client goes away: that is how streams close, not a failure.
      const streamed = String(response.getHeader('content-type') ?? '').startsWith('text/event-stream');
      const failedToSend = FAILED_TO_SEND.has(response);
      const clientLeft = !response.writableFinished && !streamed && !failedToSend;
      const level: Level = response.statusCode >= 500 || failedToSend ? 'error' : clientLeft ? 'warn' : 'info';
      if (!logger.isLevelEnabled(level)) return;
      logger[level](
        {
          req: { id: request.id, method: request.method, url: maskApiKeys((request.url ?? '').split('?')[0]) },
          // A status set for an answer the connection went before (201 on a cut-off upload) is not what was sent.
          ...(response.headersSent && { res: { statusCode: response.statusCode } }),
          responseTime: Math.round(performance.now() - started),
        },
        response.writableFinished
          ? 'request completed'
          : streamed
            ? 'event stream closed'
            : failedToSend
              ? 'response failed'
              : 'request aborted by the client',
      );
    });
    next();
  };
}

/** Nest's start-up chatter (a line per module and per route) is for debugging Nest, not for running the service. */
const NEST_STARTUP_CONTEXTS = new Set(['InstanceLoader', 'RoutesResolver', 'RouterExplorer']);

const NEST_LEVELS = {
  fatal: 'fatal',
  error: 'error',
  warn: 'warn',
  log: 'info',
  debug: 'debug',
  verbose: 'trace',
} as const satisfies Record<string, Level>;

/**
 * Nest's logger interface over pino. Nest's `Logger` passes the class's context as the last argument;
 * `logger.error({ err }, 'text')` logs the object's fields, and Nest's own exception handlers'
 * `(message, stack)` becomes one error with its stack.
 */
export class JsonLogger implements LoggerService {
  constructor(readonly pino: Pino) {}

  fatal = this.at('fatal');
  error = this.at('error');
  warn = this.at('warn');
  log = this.at('log');
  debug = this.at('debug');
  verbose = this.at('verbose');

  private at(method: keyof typeof NEST_LEVELS) {
    return (message: unknown, ...params: unknown[]): void => {
      const context = params.length > 0 ? params.pop() : undefined;
      const level = method === 'log' && NEST_STARTUP_CONTEXTS.has(context as string) ? 'debug' : NEST_LEVELS[method];
      if (!this.pino.isLevelEnabled(level)) return;
      const fields: Record<string, unknown> = {};
      if (context !== undefined) fields.context = context;
      if (message instanceof Error) {
        fields.err = message;
        this.pino[level](fields, message.message);
      } else if (typeof message === 'object' && message !== null) {
        this.pino[level]({ ...fields, ...message }, ...(params as [string?]));
      } else if (level === 'error' && typeof params[0] === 'string' && /\n\s*at /.test(params[0])) {
        const err = new Error(String(message));
        err.stack = params[0];
        this.pino[level]({ ...fields, err }, String(message));
      } else {
        this.pino[level](fields, String(message), ...params);
      }
    };
  }
}
