import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import {
  type Attributes,
  context,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
} from '@opentelemetry/api';

/**
 * The service's own spans, through OpenTelemetry's API only: with no SDK started (no OTLP endpoint set) the API is
 * a no-op and these cost a function call. `src/tracing.ts` starts the SDK.
 */
const tracer = trace.getTracer('igs');

/** A trace's context as W3C `traceparent`/`tracestate` fields, carried in a queued job's data to another process. */
export type TraceCarrier = Record<string, string>;

/** The active trace's context, to put into a job's data; undefined when nothing is traced. */
export function currentTraceCarrier(): TraceCarrier | undefined {
  const carrier: TraceCarrier = {};
  propagation.inject(context.active(), carrier);
  return Object.keys(carrier).length > 0 ? carrier : undefined;
}

/**
 * Runs `work` in a new span, a child of the active one, or of `parent` (a context carried from another process).
 * A throw marks the span failed; the span ends when `work` settles.
 */
export function inSpan<T>(
  name: string,
  options: { kind?: SpanKind; attributes?: Attributes; parent?: TraceCarrier },
  work: (span: Span) => Promise<T>,
): Promise<T> {
  const parent = options.parent ? propagation.extract(context.active(), options.parent) : context.active();
  return tracer.startActiveSpan(
    name,
    { kind: options.kind ?? SpanKind.INTERNAL, attributes: options.attributes },
    parent,
    async (span) => {
      try {
        return await work(span);
      } catch (error) {
        span.recordException(error instanceof Error ? error : String(error));
        span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
        throw error;
      } finally {
        span.end();
      }
    },
  );
}

/**
 * Runs `open` outside any trace: for a connection opened on first use. Its socket keeps the context it was opened
 * in, so its handshake, and every event it emits afterwards, would otherwise belong to whichever request or job
 * happened to use it first.
 */
export function outsideTraces<T>(open: () => T): T {
  return context.with(ROOT_CONTEXT, open);
}

/** Fields of a log line written in a span: the ids to find its trace with. */
export function traceIds(): { trace_id?: string; span_id?: string } {
  const span = trace.getActiveSpan();
  if (!span) return {};
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}

/** A provider with `forceFlush`: the SDK's, once started. */
interface Flushable {
  forceFlush(): Promise<void>;
}

/**
 * How long a stopping process waits for the collector to take its last spans. A collector that answers does within
 * milliseconds; one that hangs would otherwise hold the exit for the exporter's own timeout (10 s), past the grace
 * period the operators' guide gives on top of SHUTDOWN_TIMEOUT_MS.
 */
const TRACE_FLUSH_MS = 2000;

/** Exports the spans still batched when the process stops, so a rollout does not lose the last seconds of traces. */
@Injectable()
export class TraceFlush implements OnApplicationShutdown {
  /** TRACE_FLUSH_MS; a test waits less. */
  flushMs = TRACE_FLUSH_MS;

  async onApplicationShutdown(): Promise<void> {
    const provider = trace.getTracerProvider() as { getDelegate?: () => unknown };
    const delegate = provider.getDelegate?.() as Partial<Flushable> | undefined;
    const flushed = delegate?.forceFlush?.().catch(() => {});
    if (!flushed) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([flushed, new Promise((resolve) => (timer = setTimeout(resolve, this.flushMs)))]);
    clearTimeout(timer);
  }
}
