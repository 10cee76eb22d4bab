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

/** The samplers OpenTelemetry's Node.js SDK builds from OTEL_TRACES_SAMPLER; it ignores any other name. */
const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
];

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
  const problems: string[] = [];
  // The SDK would take a wrong value with no word (its own complaints go to a diagnostic logger nobody reads): no span
  // sent, or every job sampled, while the operator believes otherwise.
  for (const name of ['OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']) {
    const url = value(name);
    // A collector's URL may carry a token, so it is never echoed.
    if (url !== undefined && !/^https?:\/\/[^/]/.test(url)) {
      problems.push(`${name} must be a URL starting with http:// or https://`);
    }
  }
  const sampler = value('OTEL_TRACES_SAMPLER');
  if (sampler !== undefined && !SAMPLERS.includes(sampler)) {
    problems.push(`OTEL_TRACES_SAMPLER must be one of ${SAMPLERS.join(', ')}, got "${sampler}"`);
  }
  const ratio = value('OTEL_TRACES_SAMPLER_ARG');
  if (sampler?.endsWith('traceidratio') && ratio !== undefined && !(Number(ratio) >= 0 && Number(ratio) <= 1)) {
    problems.push(`OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1, got "${ratio}"`);
  }
  const protocolVariable =
    value('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') === undefined
      ? 'OTEL_EXPORTER_OTLP_PROTOCOL'
      : 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL';
  // OpenTelemetry's default encoding.
  const protocol = value(protocolVariable) ?? 'http/protobuf';
  if (!PROTOCOLS.includes(protocol)) {
    problems.push(`${protocolVariable} must be one of ${PROTOCOLS.join(', ')}, got "${protocol}"`);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  const namedInAttributes = /(^|,)\s*service\.name\s*=/.test(value('OTEL_RESOURCE_ATTRIBUTES') ?? '');
  const serviceName = value('OTEL_SERVICE_NAME') ?? (namedInAttributes ? undefined : `igs-${value('ROLE') ?? 'all'}`);
  return { protocol: protocol as TracingProtocol, serviceName };
}

/** The tracing bootstrap's read of the process environment. */
export function loadTracingSettings(): TracingSettings | undefined {
  return readTracingSettings(process.env);
}
