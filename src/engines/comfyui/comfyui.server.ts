import type { ComfyRoute, ComfyServerSetting } from '../../config/engine-settings.js';
import type { Engine, EngineLimits, EngineServer } from '../engine.js';
import { RemoteHttp } from '../remote-http.js';
import { cancelPrompt, ComfyEngine } from './comfyui.engine.js';
import { ComfySocket } from './comfyui.socket.js';
import { decodeRun } from './comfyui.workflow.js';

/**
 * A ComfyUI server (ENGINES.md, "comfyui"): one HTTP client and one websocket per worker process, shared by every
 * route to the server.
 *
 * Written on `ws` and the shared RemoteHttp rather than `@saintno/comfyui-sdk` (MIT, read at
 * comfy-addons/comfyui-sdk `src/client.ts`), which fits less than it seems:
 * - its `interrupt()` posts `/interrupt` without a `prompt_id`, which on a shared server stops whichever prompt runs,
 *   another job's included; and `queuePrompt` cannot send a `prompt_id` of the caller's choosing, which is how a job
 *   finds its prompt again after its worker died between queueing and recording it;
 * - `fetchApi` replaces the request's headers with the credential headers (custom headers only as "credentials") and
 *   takes no signal, time limit or size limit: a cancel cannot cut a request short, and `GET /view` reads any size;
 * - `uploadImage` answers `false` on any failure, so an unreachable server (retry) and a refused upload (fail) look
 *   alike;
 * - it does keep one socket per client and route events by prompt id, and `getHistory(id)` looks a prompt up after a
 *   restart: the two things written here in `ComfySocket` and `ComfyEngine.whereabouts`, in fewer lines than the
 *   adapter they would need.
 */
export class ComfyServer implements EngineServer<ComfyRoute> {
  private readonly http: RemoteHttp;
  private readonly socket: ComfySocket;

  constructor(setting: ComfyServerSetting, limits: EngineLimits) {
    this.http = new RemoteHttp({
      baseUrl: setting.url,
      headers: setting.headers,
      requestTimeoutMs: Math.min(REQUEST_TIMEOUT_MS, setting.timeoutMs),
      maxOutputBytes: limits.maxOutputBytes,
      maxOutputPixels: limits.maxOutputPixels,
      minOutputSide: limits.minOutputSide,
      what: 'ComfyUI',
    });
    this.socket = new ComfySocket(this.http.base, setting.headers);
  }

  engineFor(route: ComfyRoute): Engine {
    return new ComfyEngine(route, { http: this.http, socket: this.socket });
  }

  /** The prompt leaves the queue, or is interrupted; one an attempt already stopped needs nothing more. */
  async abandon(recorded: string): Promise<void> {
    const run = decodeRun(recorded);
    if (run && run.state !== 'stopped') await cancelPrompt(this.http, run.promptId);
  }

  /** `GET /system_stats` answering as ComfyUI does (its `system` facts) means up. */
  async probe(signal: AbortSignal): Promise<boolean> {
    try {
      const stats = await this.http.json<{ system?: unknown }>({
        method: 'GET',
        path: '/system_stats',
        retry: false,
        signal,
      });
      // ComfyUI's own answer, not any page that answers 200 at that address (a proxy's, a maintenance page).
      return typeof stats.system === 'object' && stats.system !== null;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    await this.socket.close();
  }
}

/** One request's limit (an upload, a lookup, the output's download); the job's own limit is the engine's timeout. */
const REQUEST_TIMEOUT_MS = 30_000;
