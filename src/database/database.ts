import pg from 'pg';
import { type DataSource, type EntityManager, QueryFailedError } from 'typeorm';
import type { PostgresDriver } from 'typeorm/driver/postgres/PostgresDriver.js';
import { ServiceUnavailableError } from '../common/unavailable.js';
import type { SqlStatement } from './data-source.js';
import type { StatementPipeline } from './statement-pipeline.js';

/** Runs statements inside one transaction (see `Database.transaction`). */
export interface Transaction {
  query<T>(statement: SqlStatement): Promise<T[]>;
}

/**
 * The one way to PostgreSQL for repositories: statements in, typed rows out, and a connection failure out as
 * `ServiceUnavailableError`. How a statement travels (TypeORM's pool, prepared or not, or the statement pipeline)
 * is decided here, not by callers.
 */
export class Database {
  constructor(
    private readonly dataSource: DataSource,
    private readonly pipeline: StatementPipeline,
    /**
     * False on the embedded database: it is one PostgreSQL session for all connections, so a name one connection
     * prepared would already exist for the next.
     */
    private readonly namedStatements: boolean,
  ) {}

  /** Runs a statement on the pool: writes, and reads that may take a while or wait for a lock. */
  async query<T>(statement: SqlStatement): Promise<T[]> {
    const pool = (this.dataSource.driver as PostgresDriver).master as pg.Pool;
    try {
      const { rows } = await pool.query(this.prepared(statement));
      return rows as T[];
    } catch (error) {
      throw translateDatabaseError(error);
    }
  }

  /**
   * Runs a short read that never waits for a lock through the statement pipeline: under load many such reads
   * leave in one write and wake PostgreSQL once (see `StatementPipeline`).
   */
  async read<T>(statement: SqlStatement): Promise<T[]> {
    try {
      return await this.pipeline.query<T>(this.prepared(statement));
    } catch (error) {
      throw translateDatabaseError(error);
    }
  }

  /**
   * Runs `work` in a transaction on one connection of the pool; it commits when `work` resolves. What `work` throws
   * is passed on as it is: only the statements' and the transaction's own failures are the database's.
   */
  async transaction<T>(work: (tx: Transaction) => Promise<T>): Promise<T> {
    let workFailed = false;
    const tx = (manager: EntityManager): Transaction => ({
      query: async <R>(statement: SqlStatement) => {
        try {
          return await manager.query<R[]>(statement.text, statement.values);
        } catch (error) {
          throw translateDatabaseError(error);
        }
      },
    });
    try {
      return await this.dataSource.transaction((manager) =>
        work(tx(manager)).catch((error: unknown) => {
          workFailed = true;
          throw error;
        }),
      );
    } catch (error) {
      throw workFailed ? error : translateDatabaseError(error);
    }
  }

  private prepared(statement: SqlStatement): SqlStatement {
    return this.namedStatements || statement.name === undefined
      ? statement
      : { text: statement.text, values: statement.values };
  }
}

/**
 * SQLSTATEs that mean the server cannot serve the statement now: connection exceptions (08), the server shutting
 * down, starting or its database dropped (57P01-57P04), too many connections (53300), a database that takes no
 * connections for now (55000: `ALLOW_CONNECTIONS false`, as in maintenance).
 */
const UNAVAILABLE_SQLSTATE = /^(08|57P0[1-4]$|53300$|55000$)/;

/**
 * An error PostgreSQL answered is the statement's own, unless its SQLSTATE says the server is unavailable; any
 * other error from the driver (a refused or dropped connection, a pool that timed out opening one) is the
 * connection's.
 */
export function translateDatabaseError(error: unknown): unknown {
  if (error instanceof ServiceUnavailableError) return error;
  const driverError = error instanceof QueryFailedError ? (error.driverError as unknown) : error;
  if (driverError instanceof pg.DatabaseError) {
    return UNAVAILABLE_SQLSTATE.test(driverError.code ?? '')
      ? new ServiceUnavailableError('database', { cause: error })
      : error;
  }
  // A value the driver could not serialise is a bug of the caller's, not an outage.
  return driverError instanceof TypeError || driverError instanceof RangeError
    ? error
    : new ServiceUnavailableError('database', { cause: error });
}
