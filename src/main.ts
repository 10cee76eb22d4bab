import { ConfigError } from './config/config.js';
import { loadTracingSettings } from './config/tracing-settings.js';

/**
 * The entry point. Tracing, when an OTLP endpoint is set, starts before the service's modules load, so that pg,
 * ioredis, express and http are instrumented as they load; the service is imported only then. With no endpoint not
 * one module of the OpenTelemetry SDK is loaded.
 */
try {
  const tracing = loadTracingSettings();
  if (tracing) (await import('./tracing.js')).startTracing(tracing);
} catch (error) {
  process.stderr.write(`${error instanceof ConfigError ? error.message : `Tracing did not start: ${String(error)}`}\n`);
  process.exit(1);
}
await import('./service.js');
