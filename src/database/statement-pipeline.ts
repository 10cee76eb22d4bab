import { Logger, type OnApplicationShutdown } from '@nestjs/common';
import pg from 'pg';
import { ServiceUnavailableError } from '../common/unavailable.js';
import { CONNECT_TIMEOUT_MS } from './data-source.js';
import type { SqlStatement } from './data-source.js';

/** How the pipeline's connections show in `pg_stat_activity`. */
export const PIPELINE_APPLICATION_NAME = 'igs-statement-pipeline';

/** One connection of the pipeline. */
interface Lane {
  readonly client: pg.Client;
  /** Settles once the connection is open; when it cannot open, the lane has already left its slot. */
  opened: Promise<void>;
  open: boolean;
  /** Statements sent on it and not answered yet. */
  pending: number;
  /** Its socket holds writes until the current turn of the event loop is over (`holdWritesForThisTurn`). */
  corked: boolean;
}

/**
 * Runs single statements on a few connections of its own in pg's pipeline mode: a statement is sent at once,
 * without waiting for the answers to the ones before it on the same connection, and all statements sent in
 * one turn of the event loop leave in one write. On a pool, each statement waits for a free connection and is
 * written alone, to a backend that has gone to sleep meanwhile; waking it takes a system call and often an
 * interrupt to another core. The pipeline wakes PostgreSQL once for many reads instead (figures: README,
 * "Performance").
 *
 * A statement waits behind those sent before it on its connection, so only short statements that never wait
 * for a lock belong here: the reads clients poll. Writes and transactions use TypeORM's pool. Each statement
 * is its own transaction, and an error fails that statement only.
 *
 * Connections open on the first statement, so processes that never run one (workers) hold none. A connection
 * that fails leaves its slot; the next statement opens a new one.
 */
export class StatementPipeline implements OnApplicationShutdown {
  private readonly logger = new Logger(StatementPipeline.name);
  private readonly lanes: (Lane | undefined)[];
  private closed = false;

  constructor(
    private readonly url: string,
    connections: number,
  ) {
    this.lanes = Array.from({ length: connections }, () => undefined);
  }

  async query<T>(statement: SqlStatement): Promise<T[]> {
    const lane = this.leastBusyLane();
    if (!lane.open) await lane.opened;
    this.holdWritesForThisTurn(lane);
    lane.pending++;
    try {
      const { rows } = await lane.client.query(statement);
      return rows as T[];
    } finally {
      lane.pending--;
    }
  }

  async onApplicationShutdown(): Promise<void> {
    this.closed = true;
    const lanes = [...this.lanes];
    this.lanes.fill(undefined);
    await Promise.all(lanes.map(async (lane) => lane?.client.end().catch(() => {})));
  }

  private leastBusyLane(): Lane {
    if (this.closed) throw new ServiceUnavailableError('database');
    let best = (this.lanes[0] ??= this.openLane(0));
    for (let slot = 1; slot < this.lanes.length; slot++) {
      const lane = (this.lanes[slot] ??= this.openLane(slot));
      if (lane.pending < best.pending) best = lane;
    }
    return best;
  }

  private openLane(slot: number): Lane {
    const client = new pg.Client({
      connectionString: this.url,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      application_name: PIPELINE_APPLICATION_NAME,
      pipeline: true,
    });
    const lane: Lane = { client, opened: Promise.resolve(), open: false, pending: 0, corked: false };
    const leave = () => {
      if (this.lanes[slot] === lane) this.lanes[slot] = undefined;
    };
    // The statements on the connection fail with the error themselves; without a listener, an error while it
    // is idle would end the process.
    client.on('error', (error) => {
      if (lane.open && this.lanes[slot] === lane)
        this.logger.warn({ err: error }, 'a pipelined PostgreSQL connection failed');
      leave();
    });
    client.on('end', leave);
    lane.opened = client.connect().then(
      () => {
        lane.open = true;
      },
      (error: unknown) => {
        leave();
        throw error;
      },
    );
    // Only statements wait for `opened`, and they get its error; a lane no statement chose must not end the process.
    lane.opened.catch(() => {});
    return lane;
  }

  /**
   * Corks the connection's socket until the event loop has run the rest of this turn's callbacks. Under load a
   * turn handles many requests, and their statements then share one write.
   */
  private holdWritesForThisTurn(lane: Lane): void {
    if (lane.corked) return;
    lane.corked = true;
    const socket = lane.client.connection.stream;
    socket.cork();
    setImmediate(() => {
      lane.corked = false;
      socket.uncork();
    });
  }
}
