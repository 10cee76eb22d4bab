import { isDeepStrictEqual } from 'node:util';
import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import {
  type EngineServerSetting,
  type RemoteEngineKind,
  type RouteSetting,
  type RouteVariants,
  variantsOf,
} from '../config/engine-settings.js';
import { LiveRouting, type RoutingInUse } from '../config/live-routing.js';
import { CogServer } from './cog/cog.server.js';
import { ComfyServer } from './comfyui/comfyui.server.js';
import { type Engine, type EngineLimits, type EngineServer, PermanentEngineError } from './engine.js';
import { ThreadedLocalEngine } from './local/threaded-local.engine.js';
import { ReplicateServer } from './replicate/replicate.server.js';
import { type PoolView, ServerPool } from './pool/server-pool.js';

/** Largest file a remote engine may send back: the output limit's pixels at four bytes each. */
const BYTES_PER_PIXEL = 4;

/** Where one job of a tool and generation type runs. */
export interface ResolvedRoute {
  /** The server's name in the routing file, or `local`: slots and metrics are counted by it. */
  engineName: string;
  kind: 'local' | RemoteEngineKind;
  engine: Engine;
  /**
   * Jobs in flight on the server at once across all worker processes; undefined for the local engine, whose threads
   * limit it in each process.
   */
  concurrency: number | undefined;
  /** One job's limit on this engine. */
  timeoutMs: number;
  /** The engine's servers, for an engine with several (`urls`, `discover`): each takes `concurrency` jobs. */
  pool: PoolView | undefined;
  /** What its model takes of a job's seed and number of results. */
  variants: RouteVariants;
}

/** A remote server's state as the readiness probe and the metrics show it. */
export interface ServerState {
  kind: RemoteEngineKind;
  up: boolean;
  /** A pool's servers by address, each with whether it answered. */
  servers?: Record<string, boolean>;
  /** Jobs each of a pool's servers takes at once. */
  concurrency: number;
}

/** A remote server as the worker sees it: its setting and what its kind's code made of it. */
interface Server {
  setting: EngineServerSetting;
  served: EngineServer<never>;
}

/**
 * Which engine runs which tool and generation type: the routing file's routes (the more specific `tool/type` before
 * `tool`), the `ENGINE_<TOOL>=cog:<url>` shortcuts, and the local engine for everything else. Built again from each
 * routing file put in use; a job holds the route it was given, so a running one finishes on what it started with.
 */
@Injectable()
export class EngineRegistry implements OnApplicationShutdown {
  /** One thread per job the worker runs at once: every local job has one to itself. */
  private readonly local: ThreadedLocalEngine;
  private readonly localRoute: ResolvedRoute;
  private readonly limits: EngineLimits;
  private servers = new Map<string, Server>();
  /** Servers a reload replaced or removed: their running jobs go on, and they are closed at shutdown. */
  private readonly retired: Server[] = [];
  /** By route key: `tool/generation_type` or `tool`. */
  private routes = new Map<string, ResolvedRoute>();
  private inUse: RoutingInUse;

  constructor(
    config: AppConfig,
    private readonly routing: LiveRouting,
  ) {
    this.local = new ThreadedLocalEngine(config.workerConcurrency, config.imageMaxPixels);
    this.localRoute = {
      engineName: 'local',
      kind: 'local',
      engine: this.local,
      concurrency: undefined,
      timeoutMs: config.engineTimeoutMs,
      pool: undefined,
      variants: variantsOf(undefined),
    };
    this.limits = {
      maxOutputBytes: config.outputMaxPixels * BYTES_PER_PIXEL,
      maxOutputPixels: config.outputMaxPixels,
      minOutputSide: config.imageMinSide,
    };
    this.inUse = routing.current;
    this.build(this.inUse);
    routing.onChange((next) => {
      this.inUse = next;
      this.build(next);
    });
  }

  /**
   * The route a job of this tool and generation type takes now. A tool the catalog in use no longer has (a configured
   * one removed from the file) has none: its job ends `engine_failed`, saying so. A withdrawn built-in tool
   * (`disabled: true`) keeps its route for the jobs made before.
   */
  route(tool: string, generationType: string): ResolvedRoute {
    // A tool added a moment ago may be known to the API process that took the job before this one saw the change: the
    // file is read once more before the job is refused.
    if (!this.known(tool, generationType)) this.routing.reload(`a job of the unknown tool "${tool}"`);
    if (!this.known(tool, generationType)) return { ...this.localRoute, engine: withdrawnTool(tool, generationType) };
    return this.routes.get(`${tool}/${generationType}`) ?? this.routes.get(tool) ?? this.localRoute;
  }

  private known(tool: string, generationType: string): boolean {
    const { catalog } = this.inUse;
    return (
      catalog.findGenerationType(tool, generationType) !== undefined ||
      catalog.withdrawn.some(
        (withdrawn) => withdrawn.id === tool && withdrawn.generationTypes.some((type) => type.id === generationType),
      )
    );
  }

  /**
   * The remote server of this name, whether routes lead to it or not (a rollout or a reload may have routed its tools
   * elsewhere while it still runs what earlier attempts left it), with how many jobs it takes at once: the routing
   * file's in use, else the last one of that name a reload retired; undefined for `local` and for a name never used.
   */
  server(name: string): { served: EngineServer<never>; concurrency: number | undefined } | undefined {
    const server = this.servers.get(name) ?? this.retired.findLast((retired) => retired.setting.name === name);
    return server && { served: server.served, concurrency: server.setting.concurrency };
  }

  /** The servers and routes of a routing; a server whose settings did not change is kept, with its connections. */
  private build({ engineRouting }: RoutingInUse): void {
    const servers = new Map<string, Server>();
    for (const setting of engineRouting.servers) {
      const kept = this.servers.get(setting.name);
      if (kept && isDeepStrictEqual(kept.setting, setting)) {
        servers.set(setting.name, kept);
        continue;
      }
      const served = serve(setting, this.limits);
      if (served instanceof ServerPool && kept?.served instanceof ServerPool) served.inherit(kept.served);
      servers.set(setting.name, { setting, served });
    }
    for (const [name, server] of this.servers) if (servers.get(name) !== server) this.retired.push(server);
    const routes = new Map<string, ResolvedRoute>();
    for (const route of engineRouting.routes) {
      const { setting, served } = servers.get(route.engine)!;
      routes.set(route.generationType ? `${route.tool}/${route.generationType}` : route.tool, {
        engineName: setting.name,
        kind: setting.kind,
        engine: served.engineFor(route as never),
        concurrency: setting.concurrency,
        timeoutMs: setting.timeoutMs,
        pool: served instanceof ServerPool ? served : undefined,
        variants: variantsOf(route),
      });
    }
    this.servers = servers;
    this.routes = routes;
  }

  /** Each remote server by name, with whether it answered within `timeoutMs` (a pool: one of its servers, and each). */
  async probe(timeoutMs: number): Promise<Record<string, ServerState>> {
    const entries = await Promise.all(
      [...this.servers.values()].map(async ({ setting, served }): Promise<[string, ServerState]> => {
        const signal = AbortSignal.timeout(timeoutMs);
        const { kind, concurrency } = setting;
        if (served instanceof ServerPool) {
          const servers = await served.probeEach(signal);
          return [setting.name, { kind, concurrency, up: Object.values(servers).some(Boolean), servers }];
        }
        const up = await served.probe(signal).catch(() => false);
        return [setting.name, { kind, concurrency, up }];
      }),
    );
    return Object.fromEntries(entries);
  }

  /** After the processor's own shutdown, so running jobs have finished or were handed back to the queue. */
  async onApplicationShutdown(): Promise<void> {
    const servers = [...this.servers.values(), ...this.retired];
    await Promise.all([this.local.close(), ...servers.map(({ served }) => served.close())]);
  }
}

function serve(setting: EngineServerSetting, limits: EngineLimits): EngineServer<RouteSetting> {
  switch (setting.kind) {
    case 'cog':
      if (!isPool(setting)) return new CogServer(setting, limits);
      return new ServerPool(
        setting,
        (url) => new CogServer({ ...setting, url, urls: [url], discover: undefined }, limits),
      );
    case 'replicate':
      return new ReplicateServer(setting, limits);
    case 'comfyui':
      if (!isPool(setting)) return new ComfyServer(setting, limits);
      return new ServerPool(
        setting,
        (url) => new ComfyServer({ ...setting, url, urls: [url], discover: undefined }, limits),
      );
  }
}

/** Several servers, or as many as DNS finds: one server alone is served as it always was. */
function isPool(setting: { urls: readonly string[]; discover: 'dns' | undefined }): boolean {
  return setting.discover !== undefined || setting.urls.length > 1;
}

/** The engine of a job whose tool or generation type was withdrawn before it ran: it ends the job, saying so. */
function withdrawnTool(tool: string, generationType: string): Engine {
  return {
    generate() {
      const message = `The tool "${tool}" (generation type "${generationType}") was withdrawn before the job ran.`;
      return Promise.reject(new PermanentEngineError('engine_failed', message, message));
    },
  };
}
