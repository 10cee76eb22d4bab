import type { CogRoute, CogServerSetting } from '../../config/engine-settings.js';
import type { Engine, EngineLimits, EngineServer } from '../engine.js';
import { RemoteHttp, engineFailed } from '../remote-http.js';
import { KeptInputNames, schemaInputNames } from '../model-inputs.js';
import { CogEngine, type CogInputs } from './cog.engine.js';

/** `GET /health-check` statuses of a model that takes predictions: idle, or with every slot in use. */
const UP_STATUSES = new Set(['READY', 'BUSY']);

/**
 * A Cog container (ENGINES.md, "cog"): one model behind Cog's HTTP API, at `setting.url`. Its routes share the
 * model's input schema, read from `GET /openapi.json` on first use and again once a minute.
 */
export class CogServer implements EngineServer<CogRoute> {
  private readonly http: RemoteHttp;
  private readonly inputs = new KeptInputNames<CogInputs>((signal) => this.readInputs(signal));

  constructor(
    private readonly setting: CogServerSetting,
    private readonly limits: EngineLimits,
  ) {
    this.http = new RemoteHttp({
      baseUrl: setting.url,
      headers: setting.headers,
      // A synchronous prediction keeps its request open for the whole run.
      requestTimeoutMs: setting.timeoutMs,
      maxOutputBytes: limits.maxOutputBytes,
      maxOutputPixels: limits.maxOutputPixels,
      minOutputSide: limits.minOutputSide,
      what: 'Cog',
    });
  }

  engineFor(route: CogRoute): Engine {
    return new CogEngine(this.http, route, this.setting.url, this.limits, (signal) => this.inputs.get(signal));
  }

  async probe(signal: AbortSignal): Promise<boolean> {
    const health = await this.http.json<{ status?: unknown }>({
      method: 'GET',
      path: '/health-check',
      signal,
      retry: false,
    });
    return typeof health.status === 'string' && UP_STATUSES.has(health.status);
  }

  async close(): Promise<void> {}

  private async readInputs(signal: AbortSignal | undefined): Promise<CogInputs> {
    const names = schemaInputNames(await this.http.json({ method: 'GET', path: '/openapi.json', signal }));
    if (!names) {
      const what = 'publishes no input schema (components.schemas.Input in /openapi.json).';
      // The server's address stays in the log.
      throw engineFailed(`The model at ${this.setting.url} ${what}`, `The model ${what}`);
    }
    return names;
  }
}
