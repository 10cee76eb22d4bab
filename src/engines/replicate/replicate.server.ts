import Replicate from 'replicate';
import type { ReplicateRoute, ReplicateServerSetting } from '../../config/engine-settings.js';
import {
  EngineTimeoutError,
  TransientEngineError,
  type Engine,
  type EngineLimits,
  type EngineServer,
} from '../engine.js';
import { describeUrl, networkErrorCode, RemoteHttp } from '../remote-http.js';
import { abandonPrediction, ReplicateEngine } from './replicate.engine.js';

/** One request's limit (an upload, a prediction's creation with its short wait, a poll, a download). */
const REQUEST_TIMEOUT_MS = 30_000;

/**
 * Replicate's hosted API (or anything that speaks it at `setting.baseUrl`), through the official `replicate` client:
 * one client per server, whose requests carry the operator's headers and a time limit each.
 */
export class ReplicateServer implements EngineServer<ReplicateRoute> {
  private readonly client: Replicate;
  private readonly downloads: RemoteHttp;
  private readonly errorBodies = new WeakMap<Response, string>();

  constructor(
    setting: ReplicateServerSetting,
    private readonly limits: EngineLimits,
  ) {
    this.client = new Replicate({
      auth: setting.token,
      baseUrl: setting.baseUrl,
      fetch: serverFetch(setting.headers, this.errorBodies),
    });
    // Outputs on the API's own origin are fetched with its credentials; anywhere else only over https, without them.
    this.downloads = new RemoteHttp({
      baseUrl: setting.baseUrl,
      headers: { ...setting.headers, Authorization: `Bearer ${setting.token}` },
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      maxOutputBytes: limits.maxOutputBytes,
      maxOutputPixels: limits.maxOutputPixels,
      minOutputSide: limits.minOutputSide,
      what: 'Replicate',
    });
  }

  engineFor(route: ReplicateRoute): Engine {
    return new ReplicateEngine(this.client, route, this.downloads, this.errorBodies, this.limits);
  }

  async abandon(recorded: string): Promise<void> {
    await abandonPrediction(this.client, recorded);
  }

  /** The token's account: an authenticated answer means the API is up and the token good. */
  async probe(signal: AbortSignal): Promise<boolean> {
    try {
      await this.client.accounts.current({ signal });
      return true;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {}
}

/**
 * The client's `fetch`: the operator's headers (the client's own, such as its token, win), a time limit per request,
 * and failures as the engine's errors. Error answers' bodies are kept by response for the engine to quote Replicate's
 * `detail`. The client repeats any request that throws (up to five times, at once); a request other than GET whose
 * fate is unknown is not repeated blindly (a second prediction would run the model twice), so its repeats fail the
 * same way without reaching the server.
 */
function serverFetch(
  headers: Readonly<Record<string, string>>,
  errorBodies: WeakMap<Response, string>,
): (input: Request | string | URL, init?: RequestInit) => Promise<Response> {
  const failed = new WeakMap<RequestInit, unknown>();
  return async (input, init = {}) => {
    if (failed.has(init)) throw failed.get(init);
    const url = new URL(input instanceof Request ? input.url : input);
    const method = init.method ?? 'GET';
    const merged = new Headers(headers);
    new Headers(init.headers).forEach((value, name) => merged.set(name, value));
    const timeout = AbortSignal.timeout(REQUEST_TIMEOUT_MS);
    const caller = init.signal ?? undefined;
    const signal = caller ? AbortSignal.any([caller, timeout]) : timeout;
    const label = `Replicate ${method} ${describeUrl(url)}`;
    try {
      const response = await fetch(url, { ...init, headers: merged, signal });
      if (response.ok) return response;
      const body = await response.text();
      const kept = new Response(body, {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
      });
      errorBodies.set(kept, body);
      return kept;
    } catch (error) {
      if (caller?.aborted) throw caller.reason;
      const mapped = timeout.aborted
        ? new EngineTimeoutError(`${label} timed out after ${REQUEST_TIMEOUT_MS} ms`, { cause: error })
        : new TransientEngineError(`${label} failed: ${networkErrorCode(error)}`, { cause: error });
      if (method !== 'GET') failed.set(init, mapped);
      throw mapped;
    }
  };
}
