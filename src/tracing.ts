import { createRequire, register } from 'node:module';
import type { ClientRequest, IncomingMessage, OutgoingHttpHeaders, RequestOptions, Server } from 'node:http';
import type { Attributes, Span } from '@opentelemetry/api';
import type { Request } from 'express';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { type CommandArgs, IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultDbStatementSerializer } from '@opentelemetry/redis-common';
import { NodeSDK } from '@opentelemetry/sdk-node';
import type { TracingSettings } from './config/tracing-settings.js';
import { routeLabel, UNMATCHED_ROUTE } from './metrics/http-metrics.js';

/** The packages the instrumentations patch, also when the service's own ES modules import them. */
const INSTRUMENTED = ['http', 'https', 'pg', 'pg-pool', 'ioredis'];

/**
 * The requests that get a trace: those that create or change something (a job, a cancel, a rating, a deletion, a
 * webhook secret rotated), that is every method but GET and HEAD. A trace follows a job (OPERATIONS.md); reads belong
 * to none, and their latency per route is Prometheus's (`http_request_duration_seconds`). Tracing them would cost more
 * than the read: an item GET's server, database and Redis spans take more CPU than its whole answer
 * (docs/performance.md, Tracing). Probes, scrapes, history pages and event streams (a GET that lasts hours) are all
 * reads.
 */
function isUntracedRequest(request: Pick<IncomingMessage, 'method'>): boolean {
  return request.method === 'GET' || request.method === 'HEAD';
}

/**
 * Lets the server's untraced requests bypass the http instrumentation, which is left the traced ones only. The
 * instrumentation patches `http.Server.prototype.emit` and, for a request its ignore hook passes over, still runs
 * the request in a context of its own and rebinds its request and response: it gives both its own copies of
 * `on`, `once`, `addListener`, `removeListener`... that wrap every listener Node, Express and the service add, so
 * each of them runs in a context switch. None of that serves a read, whose database and Redis calls are untraced
 * anyway (`requireParentSpan`), and it was most of what tracing cost a read (docs/performance.md, Tracing).
 *
 * Run once the SDK has started, so that the `http` it requires is the one the instrumentation has patched.
 */
function serveUntracedRequestsBare(): void {
  type Emit = (this: Server, event: string | symbol, ...args: unknown[]) => boolean;
  const { Server } = createRequire(import.meta.url)('node:http') as typeof import('node:http');
  const instrumented = (Server.prototype as unknown as { emit: Emit }).emit;
  // What `Server` emitted with before the instrumentation: it has no `emit` of its own, it inherits one.
  const bare = (Object.getPrototypeOf(Server.prototype) as { emit: Emit }).emit;
  Server.prototype.emit = function emit(this: Server, event: string | symbol, ...args: unknown[]): boolean {
    const untraced = event === 'request' && isUntracedRequest(args[0] as IncomingMessage);
    return (untraced ? bare : instrumented).call(this, event, ...args);
  };
}

/**
 * Names a request's span after the route that answered it (`DELETE /user/generation-history/:id`, `http.route`), with
 * the route label the HTTP metrics use: the template, never the URL with its ids. Requests no route took keep the
 * method alone, as OpenTelemetry's semantic conventions ask. (OpenTelemetry's Express instrumentation would name it
 * too, but it does its work on every Express layer of every request, traced or not, which a read pays for in
 * throughput, for a name the metrics already compute.)
 */
function nameAfterRoute(span: Span, request: ClientRequest | IncomingMessage): void {
  // Only the server's requests went through Express's router; a client span's request is a ClientRequest.
  if (typeof (request as Partial<Request>).baseUrl !== 'string') return;
  const route = routeLabel(request as Request);
  if (route === UNMATCHED_ROUTE) return;
  span.setAttribute('http.route', route);
  span.updateName(`${request.method} ${route}`);
}

/**
 * What a webhook delivery's span says of its URL: the receiver's origin alone. The URL is the receiver's secret as
 * much as the signing secret is (Slack and Discord put a token in its path, others in its query), and OpenTelemetry's
 * default `url.full` would carry it whole to the collector. A delivery is known by Standard Webhooks' `webhook-id`.
 */
export function webhookUrlAttributes(request: RequestOptions): Attributes {
  if ((request.headers as OutgoingHttpHeaders | undefined)?.['webhook-id'] === undefined) return {};
  const hostname = request.hostname ?? request.host ?? '';
  const host = hostname.includes(':') ? `[${hostname}]` : hostname;
  return { 'url.full': `${request.protocol ?? 'http:'}//${host}${request.port ? `:${request.port}` : ''}/` };
}

/**
 * A Redis command as its span shows it: OpenTelemetry's default, which keeps keys and drops values, but for scripts,
 * whose arguments it keeps whole. Bull's scripts take a job's data, options and result as arguments: their spans name
 * the script (by its sha; an EVAL's first argument is the script's whole source) and its keys only.
 */
export function redisStatement(command: string, args: CommandArgs): string {
  const script = /^eval(sha)?$/i.exec(command);
  if (!script) return defaultDbStatementSerializer(command, args);
  const keys = args.slice(2, 2 + Number(args[1] ?? 0));
  const rest = args.length - 2 - keys.length;
  return [
    command,
    ...(script[1] ? [args[0]] : []),
    args[1],
    ...keys,
    ...(rest > 0 ? [`[${rest} other arguments]`] : []),
  ].join(' ');
}

/**
 * Starts OpenTelemetry's SDK. It must run before the service's modules load: the instrumentations patch pg, ioredis
 * and http as they are loaded, through `require` for CommonJS importers and through the import-in-the-middle
 * loader for ES modules (hooking only the packages above, so the rest of the service loads as it always does).
 */
export function startTracing(settings: TracingSettings): void {
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, { data: { include: INSTRUMENTED } });
  const sdk = new NodeSDK({
    serviceName: settings.serviceName,
    // Traces only: the service's metrics are Prometheus's (`/metrics`) and its logs go to stdout. Left to their
    // defaults, the SDK would also post metrics and logs to the OTLP endpoint, and record a histogram per request.
    metricReaders: [],
    logRecordProcessors: [],
    traceExporter: settings.protocol === 'http/json' ? new JsonExporter() : new ProtobufExporter(),
    instrumentations: [
      // Queue polling, event fan-out, metrics, sweeps and reads (a media file streamed from S3) would each be a trace
      // of one span: only calls made for a traced request or a job are traced.
      new HttpInstrumentation({
        ignoreIncomingRequestHook: isUntracedRequest,
        requireParentforOutgoingSpans: true,
        applyCustomAttributesOnSpan: nameAfterRoute,
        startOutgoingSpanHook: webhookUrlAttributes,
      }),
      // A span per pool checkout would double the database spans of every request for little: the queries stay.
      new PgInstrumentation({ requireParentSpan: true, ignoreConnectSpans: true }),
      new IORedisInstrumentation({ requireParentSpan: true, dbStatementSerializer: redisStatement }),
      // The engines call model servers with fetch, which is undici's: a span per call, and its traceparent header,
      // so a model server that traces (ComfyUI behind a proxy, Replicate) joins the job's trace.
      new UndiciInstrumentation({ requireParentforSpans: true }),
    ],
  });
  sdk.start();
  serveUntracedRequestsBare();
}
