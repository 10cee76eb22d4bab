import { Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import type { EngineServerSetting, RemoteEngineKind, RouteSetting } from '../config/engine-settings.js';
import { CogServer } from './cog/cog.server.js';
import { ComfyServer } from './comfyui/comfyui.server.js';
import type { Engine, EngineLimits, EngineServer } from './engine.js';
import { ThreadedLocalEngine } from './local/threaded-local.engine.js';
import { ReplicateServer } from './replicate/replicate.server.js';

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
}

/** A remote server as the worker sees it: its setting and what its kind's code made of it. */
interface Server {
  setting: EngineServerSetting;
  served: EngineServer<never>;
}

/**
 * Which engine runs which tool and generation type: the routing file's routes (the more specific `tool/type` before
 * `tool`), the `ENGINE_<TOOL>=cog:<url>` shortcuts, and the local engine for everything else.
 */
@Injectable()
export class EngineRegistry implements OnApplicationShutdown {
  /** One thread per job the worker runs at once: every local job has one to itself. */
  private readonly local: ThreadedLocalEngine;
  private readonly localRoute: ResolvedRoute;
  private readonly servers = new Map<string, Server>();
  /** By route key: `tool/generation_type` or `tool`. */
  private readonly routes = new Map<string, ResolvedRoute>();

  constructor(config: AppConfig) {
    this.local = new ThreadedLocalEngine(config.workerConcurrency, config.imageMaxPixels);
    this.localRoute = {
      engineName: 'local',
      kind: 'local',
      engine: this.local,
      concurrency: undefined,
      timeoutMs: config.engineTimeoutMs,
    };
    const limits: EngineLimits = {
      maxOutputBytes: config.outputMaxPixels * BYTES_PER_PIXEL,
      maxOutputPixels: config.outputMaxPixels,
      minOutputSide: config.imageMinSide,
    };
    for (const setting of config.engineRouting.servers) {
      this.servers.set(setting.name, { setting, served: serve(setting, limits) });
    }
    for (const route of config.engineRouting.routes) {
      const { setting, served } = this.servers.get(route.engine)!;
      this.routes.set(route.generationType ? `${route.tool}/${route.generationType}` : route.tool, {
        engineName: setting.name,
        kind: setting.kind,
        engine: served.engineFor(route as never),
        concurrency: setting.concurrency,
        timeoutMs: setting.timeoutMs,
      });
    }
  }

  route(tool: string, generationType: string): ResolvedRoute {
    return this.routes.get(`${tool}/${generationType}`) ?? this.routes.get(tool) ?? this.localRoute;
  }

  /**
   * The remote server of this name in the routing file, whether routes lead to it or not (a rollout may have routed
   * its tools elsewhere while it still runs what earlier attempts left it), with how many jobs it takes at once;
   * undefined for `local` and for a name the file does not have.
   */
  server(name: string): { served: EngineServer<never>; concurrency: number | undefined } | undefined {
    const server = this.servers.get(name);
    return server && { served: server.served, concurrency: server.setting.concurrency };
  }

  /** Each remote server by name, with whether it answered within `timeoutMs`. */
  async probe(timeoutMs: number): Promise<Record<string, { kind: RemoteEngineKind; up: boolean }>> {
    const entries = await Promise.all(
      [...this.servers.values()].map(async ({ setting, served }) => {
        const up = await served.probe(AbortSignal.timeout(timeoutMs)).catch(() => false);
        return [setting.name, { kind: setting.kind, up }] as const;
      }),
    );
    return Object.fromEntries(entries);
  }

  /** After the processor's own shutdown, so running jobs have finished or were handed back to the queue. */
  async onApplicationShutdown(): Promise<void> {
    await Promise.all([this.local.close(), ...[...this.servers.values()].map(({ served }) => served.close())]);
  }
}

function serve(setting: EngineServerSetting, limits: EngineLimits): EngineServer<RouteSetting> {
  switch (setting.kind) {
    case 'cog':
      return new CogServer(setting, limits);
    case 'replicate':
      return new ReplicateServer(setting, limits);
    case 'comfyui':
      return new ComfyServer(setting, limits);
  }
}
