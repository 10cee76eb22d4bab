import { createHash } from 'node:crypto';
import { type FSWatcher, watch } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Injectable, Logger, type OnModuleDestroy, type OnModuleInit } from '@nestjs/common';
import type { Catalog } from '../catalog/catalog.js';
import { AppConfig, ConfigError } from './config.js';
import type { EngineRouting } from './engine-settings.js';

/** The catalog and routes one process uses, and which version of the routing file they are. */
export interface RoutingInUse {
  /**
   * Names the version: a number made of what was read (the same file gives the same number in every process), 0
   * without a routing file. `igs_config_generation` shows it.
   */
  generation: number;
  catalog: Catalog;
  engineRouting: EngineRouting;
}

/** Events in the watched folders settle this long before the file is read (an editor writes in several steps). */
const SETTLE_MS = 200;
/**
 * A file that fails its checks right after a change is read once more this much later before it is refused: a copy
 * half written when first read is not a mistake to count.
 */
const RECHECK_MS = 1000;

/**
 * The routing file in use, read again when it changes (its folder is watched, so a Kubernetes ConfigMap's `..data`
 * symlink swap is seen too, as are the folders of its workflows) and on SIGHUP. A file that does not pass the boot's
 * checks is not used: the last good one stays, its problems are logged with their key paths and counted
 * (`igs_config_reload_failures_total`).
 */
@Injectable()
export class LiveRouting implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger(LiveRouting.name);
  private inUse: RoutingInUse;
  private readonly listeners = new Set<(routing: RoutingInUse) => void>();
  private watchers: FSWatcher[] = [];
  private settling: NodeJS.Timeout | undefined;
  private failures = 0;
  private readonly onHangUp = () => this.reload('SIGHUP');

  constructor(private readonly config: AppConfig) {
    this.inUse = withGeneration(config.catalog, config.engineRouting, config.enginesFile !== undefined);
  }

  /** What this process uses now; read it for each request or job, never keep it. */
  get current(): RoutingInUse {
    return this.inUse;
  }

  /** Reloads that found the file bad, since this process started. */
  get reloadFailures(): number {
    return this.failures;
  }

  /** Calls `listener` with each new routing put in use; returns what stops that. */
  onChange(listener: (routing: RoutingInUse) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  onModuleInit(): void {
    // Taken without a routing file too (there is nothing to read again): SIGHUP never stops the service.
    process.on('SIGHUP', this.onHangUp);
    if (this.config.enginesFile !== undefined) this.watch();
  }

  onModuleDestroy(): void {
    process.off('SIGHUP', this.onHangUp);
    clearTimeout(this.settling);
    for (const watcher of this.watchers) watcher.close();
    this.watchers = [];
  }

  /**
   * Reads the file again and puts it in use if it passes the boot's checks and differs from the one in use; true when
   * the file is good. `why` is logged.
   */
  reload(why: string): boolean {
    if (this.config.enginesFile === undefined) return true;
    let read: { catalog: Catalog; engineRouting: EngineRouting };
    try {
      read = this.config.readRouting();
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      this.failures += 1;
      this.logger.error(
        { problems: error.problems, generation: this.inUse.generation, why },
        'the routing file was not reloaded: the last good one stays in use',
      );
      return false;
    }
    const next = withGeneration(read.catalog, read.engineRouting, true);
    if (next.generation === this.inUse.generation) return true;
    const previous = this.inUse.generation;
    this.inUse = next;
    this.logger.log({ generation: next.generation, previous, why }, 'the routing file was reloaded');
    for (const listener of this.listeners) listener(next);
    // A new workflow may sit in a folder not watched yet.
    this.watch();
    return true;
  }

  /** Watches the routing file's folder and those of the workflows in use. */
  private watch(): void {
    for (const watcher of this.watchers) watcher.close();
    const folder = dirname(this.config.enginesFile!);
    const folders = new Set([folder]);
    for (const route of this.inUse.engineRouting.routes) {
      if (route.kind === 'comfyui') folders.add(dirname(resolve(folder, route.workflowFile)));
    }
    this.watchers = [...folders].flatMap((folder) => {
      try {
        const watcher = watch(folder, () => this.changed());
        watcher.on('error', (error) => this.logger.warn({ folder, err: error.message }, 'a watched folder failed'));
        // A CLI command's process ends when its work does, watched folders or not.
        watcher.unref();
        return [watcher];
      } catch (error) {
        this.logger.warn({ folder, err: (error as Error).message }, 'a folder of the routing file cannot be watched');
        return [];
      }
    });
  }

  private changed(): void {
    clearTimeout(this.settling);
    this.settling = setTimeout(() => {
      // A copy half written fails its checks: it is read again once before it counts as a bad file.
      if (this.wouldFail()) {
        this.settling = setTimeout(() => this.reload('the file changed'), RECHECK_MS);
        this.settling.unref();
      } else {
        this.reload('the file changed');
      }
    }, SETTLE_MS);
    this.settling.unref();
  }

  private wouldFail(): boolean {
    try {
      this.config.readRouting();
      return false;
    } catch (error) {
      if (error instanceof ConfigError) return true;
      throw error;
    }
  }
}

/** The routing with its generation: a number from a digest of what was read, so equal files give equal numbers. */
function withGeneration(catalog: Catalog, engineRouting: EngineRouting, fromFile: boolean): RoutingInUse {
  if (!fromFile) return { generation: 0, catalog, engineRouting };
  const digest = createHash('sha256')
    .update(JSON.stringify({ tools: catalog.tools, withdrawn: catalog.withdrawn, engineRouting }))
    .digest('hex');
  // 48 bits: a whole number a Prometheus gauge (a float64) holds exactly.
  return { generation: Number.parseInt(digest.slice(0, 12), 16), catalog, engineRouting };
}
