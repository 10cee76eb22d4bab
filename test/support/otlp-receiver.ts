/**
 * A loopback OTLP/HTTP trace receiver, as an OpenTelemetry Collector's `otlp` receiver answers: follows the OTLP
 * specification's HTTP transport (open-telemetry/opentelemetry-proto: `docs/specification.md`, "OTLP/HTTP") and the
 * messages of `opentelemetry/proto/collector/trace/v1/trace_service.proto` and `trace/v1/trace.proto`.
 *
 * - `POST /v1/traces` only: another path is 404 (and kept in `refused`: metrics or logs sent to a trace endpoint),
 *   another method 405.
 * - `application/json` bodies (ids as hex strings, enum values as numbers, as the JSON encoding says) are decoded into
 *   spans; `application/x-protobuf` bodies are kept as bytes; any other content type is 415.
 * - Each accepted request is answered 200 with an empty ExportTraceServiceResponse in the request's encoding.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';

/** One span as the receiver got it, with its resource's attributes. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  name: string;
  /** SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, unknown>;
  resource: Record<string, unknown>;
  /** StatusCode: 0 unset, 1 ok, 2 error. */
  status: number;
}

export interface OtlpReceiver {
  /** The value for OTEL_EXPORTER_OTLP_ENDPOINT. */
  endpoint: string;
  spans: ReceivedSpan[];
  /** Bodies of every request, in order, whatever their encoding. */
  requests: { contentType: string; body: Buffer }[];
  /** `POST /v1/metrics` and the like: the requests to any other path, as method and path. */
  refused: string[];
  close(): Promise<void>;
}

interface AnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
  arrayValue?: { values?: AnyValue[] };
}

interface KeyValue {
  key: string;
  value: AnyValue;
}

interface ExportTraceServiceRequest {
  resourceSpans?: {
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: {
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        attributes?: KeyValue[];
        status?: { code?: number };
      }[];
    }[];
  }[];
}

function valueOf(value: AnyValue): unknown {
  if (value.arrayValue) return (value.arrayValue.values ?? []).map(valueOf);
  if (value.intValue !== undefined) return Number(value.intValue);
  return value.stringValue ?? value.boolValue ?? value.doubleValue;
}

function attributesOf(list: KeyValue[] = []): Record<string, unknown> {
  return Object.fromEntries(list.map(({ key, value }) => [key, valueOf(value)]));
}

function spansOf(request: ExportTraceServiceRequest): ReceivedSpan[] {
  return (request.resourceSpans ?? []).flatMap((resourceSpans) => {
    const resource = attributesOf(resourceSpans.resource?.attributes);
    return (resourceSpans.scopeSpans ?? []).flatMap((scope) =>
      (scope.spans ?? []).map((span) => ({
        traceId: span.traceId,
        spanId: span.spanId,
        parentSpanId: span.parentSpanId || undefined,
        name: span.name,
        kind: span.kind,
        attributes: attributesOf(span.attributes),
        resource,
        status: span.status?.code ?? 0,
      })),
    );
  });
}

async function bodyOf(request: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** Starts a receiver on `port` of 127.0.0.1 (0: any free port). */
export async function startOtlpReceiver(port = 0): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const requests: OtlpReceiver['requests'] = [];
  const refused: string[] = [];
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    void (async () => {
      if (request.url !== '/v1/traces') {
        refused.push(`${request.method} ${request.url}`);
        return response.writeHead(404).end();
      }
      if (request.method !== 'POST') return response.writeHead(405, { Allow: 'POST' }).end();
      const contentType = (request.headers['content-type'] ?? '').split(';')[0].trim();
      if (contentType !== 'application/json' && contentType !== 'application/x-protobuf') {
        return response.writeHead(415).end();
      }
      const body = await bodyOf(request);
      requests.push({ contentType, body });
      if (contentType === 'application/json') {
        spans.push(...spansOf(JSON.parse(body.toString('utf8')) as ExportTraceServiceRequest));
        response.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
      } else {
        // An empty ExportTraceServiceResponse is zero bytes in protobuf.
        response.writeHead(200, { 'Content-Type': 'application/x-protobuf' }).end();
      }
    })();
  });
  server.listen(port, '127.0.0.1');
  await once(server, 'listening');
  const { port: bound } = server.address() as { port: number };
  return {
    endpoint: `http://127.0.0.1:${bound}`,
    spans,
    requests,
    refused,
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, 'close');
    },
  };
}
