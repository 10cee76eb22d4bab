import { ConfigError } from './config.js';
import { readTracingSettings } from './tracing-settings.js';

const ENDPOINT = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };

describe('readTracingSettings', () => {
  it('is off with no endpoint, whatever else is set', () => {
    expect(readTracingSettings({})).toBeUndefined();
    expect(readTracingSettings({ OTEL_SERVICE_NAME: 'igs', OTEL_EXPORTER_OTLP_ENDPOINT: ' ' })).toBeUndefined();
  });

  it('is off when the SDK is disabled, even with an endpoint', () => {
    expect(readTracingSettings({ ...ENDPOINT, OTEL_SDK_DISABLED: 'true' })).toBeUndefined();
  });

  it('is on with the generic or the traces endpoint, in protobuf unless told otherwise', () => {
    expect(readTracingSettings(ENDPOINT)).toEqual({ protocol: 'http/protobuf', serviceName: 'igs-all' });
    expect(
      readTracingSettings({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces', ROLE: 'worker' }),
    ).toEqual({ protocol: 'http/protobuf', serviceName: 'igs-worker' });
  });

  it('takes the traces protocol over the generic one', () => {
    const sut = readTracingSettings({
      ...ENDPOINT,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
    });
    expect(sut?.protocol).toBe('http/json');
  });

  it('refuses a protocol the service does not export in, naming the variable', () => {
    expect(() => readTracingSettings({ ...ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toThrow(
      new ConfigError(['OTEL_EXPORTER_OTLP_PROTOCOL must be one of http/json, http/protobuf, got "grpc"']),
    );
  });

  it('refuses an endpoint that is no http(s) URL, without echoing it', () => {
    expect(() => readTracingSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' })).toThrow(
      new ConfigError(['OTEL_EXPORTER_OTLP_ENDPOINT must be a URL starting with http:// or https://']),
    );
    expect(() => readTracingSettings({ ...ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'grpc://c:4317' })).toThrow(
      new ConfigError(['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be a URL starting with http:// or https://']),
    );
  });

  it('refuses a sampler the SDK would ignore, and a ratio out of range, naming every wrong variable', () => {
    expect(() => readTracingSettings({ ...ENDPOINT, OTEL_TRACES_SAMPLER: 'ratio' })).toThrow(
      new ConfigError([
        'OTEL_TRACES_SAMPLER must be one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio, got "ratio"',
      ]),
    );
    const ratio = { ...ENDPOINT, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '10%' };
    expect(() => readTracingSettings({ ...ratio, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toThrow(
      new ConfigError([
        'OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1, got "10%"',
        'OTEL_EXPORTER_OTLP_PROTOCOL must be one of http/json, http/protobuf, got "grpc"',
      ]),
    );
    expect(readTracingSettings({ ...ratio, OTEL_TRACES_SAMPLER_ARG: '0.1' })?.protocol).toBe('http/protobuf');
  });

  it("leaves the service's name to OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES when they give one", () => {
    expect(readTracingSettings({ ...ENDPOINT, OTEL_SERVICE_NAME: 'images' })?.serviceName).toBe('images');
    const named = { ...ENDPOINT, OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod,service.name=images' };
    expect(readTracingSettings(named)?.serviceName).toBeUndefined();
    const unnamed = { ...ENDPOINT, ROLE: 'api', OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod' };
    expect(readTracingSettings(unnamed)?.serviceName).toBe('igs-api');
  });
});
