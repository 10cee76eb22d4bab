import { ConfigError } from './config.js';

/** The OTLP encodings the service exports traces in. */
export type TracingProtocol = 'http/json' | 'http/protobuf';

/** What the tracing bootstrap decides by itself; the rest of `OTEL_*` is the OpenTelemetry SDK's to read. */
export interface TracingSettings {
  protocol: TracingProtocol;
  /** OTEL_SERVICE_NAME, else `igs-<ROLE>`; undefined when OTEL_RESOURCE_ATTRIBUTES names the service itself. */
  serviceName: string | undefined;
}

const PROTOCOLS: readonly string[] = ['http/json', 'http/protobuf'] satisfies TracingProtocol[];

/**
 * Tracing settings, or undefined when tracing is off: no OTLP endpoint set (an exporter would otherwise send to
 * localhost:4318), or OTEL_SDK_DISABLED=true. Read before the service's own configuration, which may still fail.
 *
 * The SDK keeps reading the variables whose meaning is its own (sampler and its argument, resource attributes,
 * endpoints, headers, timeouts, batching), so they behave as OpenTelemetry documents them everywhere.
 */
export function readTracingSettings(env: NodeJS.ProcessEnv): TracingSettings | undefined {
  const value = (name: string) => {
    const raw = env[name]?.trim();
    return raw === '' ? undefined : raw;
  };
  if (value('OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return undefined;
  if (value('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') === undefined && value('OTEL_EXPORTER_OTLP_ENDPOINT') === undefined) {
    return undefined;
  }
  const protocolVariable =
    value('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') === undefined
      ? 'OTEL_EXPORTER_OTLP_PROTOCOL'
      : 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL';
  // OpenTelemetry's default encoding.
  const protocol = value(protocolVariable) ?? 'http/protobuf';
  if (!PROTOCOLS.includes(protocol)) {
    throw new ConfigError([`${protocolVariable} must be one of ${PROTOCOLS.join(', ')}, got "${protocol}"`]);
  }
  const namedInAttributes = /(^|,)\s*service\.name\s*=/.test(value('OTEL_RESOURCE_ATTRIBUTES') ?? '');
  const serviceName = value('OTEL_SERVICE_NAME') ?? (namedInAttributes ? undefined : `igs-${value('ROLE') ?? 'all'}`);
  return { protocol: protocol as TracingProtocol, serviceName };
}

/** The tracing bootstrap's read of the process environment. */
export function loadTracingSettings(): TracingSettings | undefined {
  return readTracingSettings(process.env);
}
