import { Injectable } from '@nestjs/common';
import { Counter, Gauge } from 'prom-client';
import { LiveRouting } from '../config/live-routing.js';
import { Metrics } from './metrics.js';

/**
 * Which routing file each process uses, and how often a changed one was refused: processes whose generations differ
 * more than a few seconds did not all take a change, and a failure means the file in the folder is not the one in use.
 */
@Injectable()
export class ConfigMetrics {
  constructor(metrics: Metrics, routing: LiveRouting) {
    const generation = new Gauge({
      name: 'igs_config_generation',
      help: 'The routing file in use (ENGINES_FILE): a number made of what was read, equal in every process that read the same file; 0 without one',
      registers: [metrics.registry],
      collect() {
        generation.set(routing.current.generation);
      },
    });
    let counted = 0;
    const failures = new Counter({
      name: 'igs_config_reload_failures_total',
      help: 'Changes of the routing file (or SIGHUPs) whose file did not pass the checks: the last good one stayed in use',
      registers: [metrics.registry],
      collect() {
        failures.inc(routing.reloadFailures - counted);
        counted = routing.reloadFailures;
      },
    });
  }
}
