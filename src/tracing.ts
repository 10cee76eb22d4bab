import { register } from 'node:module';
import type { IncomingMessage, OutgoingHttpHeaders, RequestOptions } from 'node:http';
import type { Attributes } from '@opentelemetry/api';
import { ExpressInstrumentation, ExpressLayerType } from '@opentelemetry/instrumentation-express';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { type CommandArgs, IORedisInstrumentation } from '@opentelemetry/instrumentation-ioredis';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { UndiciInstrumentation } from '@opentelemetry/instrumentation-undici';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultDbStatementSerializer } from '@opentelemetry/redis-common';
import { NodeSDK } from '@opentelemetry/sdk-node';
import type { TracingSettings } from './config/tracing-settings.js';

/** The packages the instrumentations patch, also when the service's own ES modules import them. */
const INSTRUMENTED = ['http', 'https', 'express', 'pg', 'pg-pool', 'ioredis'];

/** Probes and scrapes come every few seconds and say nothing about a job. */
function isProbe(request: IncomingMessage): boolean {
  return request.url?.startsWith('/health/') === true || request.url === '/metrics';
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
 * Starts OpenTelemetry's SDK. It must run before the service's modules load: the instrumentations patch pg, ioredis,
 * express and http as they are loaded, through `require` for CommonJS importers and through the import-in-the-middle
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
      new HttpInstrumentation({ ignoreIncomingRequestHook: isProbe, startOutgoingSpanHook: webhookUrlAttributes }),
      // Express's part is the route: it names the HTTP span (`GET /user/generation-history/:id`, `http.route`). Its
      // spans would only repeat that one, at a cost on every request: the route's handler runs the whole request but
      // for three anonymous middleware (request id, metrics, headers).
      new ExpressInstrumentation({
        ignoreLayersType: [ExpressLayerType.MIDDLEWARE, ExpressLayerType.ROUTER, ExpressLayerType.REQUEST_HANDLER],
      }),
      // Queue polling, event fan-out, metrics and sweeps would each be a trace of one span: only calls made for a
      // request or a job are traced.
      // A span per pool checkout would double the database spans of every request for little: the queries stay.
      new PgInstrumentation({ requireParentSpan: true, ignoreConnectSpans: true }),
      new IORedisInstrumentation({ requireParentSpan: true, dbStatementSerializer: redisStatement }),
      // The engines call model servers with fetch, which is undici's: a span per call, and its traceparent header,
      // so a model server that traces (ComfyUI behind a proxy, Replicate) joins the job's trace.
      new UndiciInstrumentation({ requireParentforSpans: true }),
    ],
  });
  sdk.start();
}
