import { setTimeout } from 'node:timers/promises';
import type { LoggerService } from '@nestjs/common';
import pg from 'pg';
import { DataSource, type DataSourceOptions } from 'typeorm';
import { Initial1795292142970 } from './migrations/1795292142970-Initial.js';
import { HistoryCounts1795296939184 } from './migrations/1795296939184-HistoryCounts.js';
import { CreateHistoryItem1795301680431 } from './migrations/1795301680431-CreateHistoryItem.js';
import { Webhooks1795310000000 } from './migrations/1795310000000-Webhooks.js';
import { RetentionIndex1795320000000 } from './migrations/1795320000000-RetentionIndex.js';
import { AdminKeysAndUserLimits1795330000000 } from './migrations/1795330000000-AdminKeysAndUserLimits.js';
import { ConcurrencyLimits1795345000000 } from './migrations/1795345000000-ConcurrencyLimits.js';
import { Files1795350000000 } from './migrations/1795350000000-Files.js';
import { JobView1795360000000 } from './migrations/1795360000000-JobView.js';
import { SeedsAndOutputs1795370000000 } from './migrations/1795370000000-SeedsAndOutputs.js';

export const MIGRATIONS = [
  Initial1795292142970,
  HistoryCounts1795296939184,
  CreateHistoryItem1795301680431,
  Webhooks1795310000000,
  RetentionIndex1795320000000,
  AdminKeysAndUserLimits1795330000000,
  ConcurrencyLimits1795345000000,
  Files1795350000000,
  JobView1795360000000,
  SeedsAndOutputs1795370000000,
];

/** Any fixed 64-bit number: every replica takes the same lock, so one migrates while the others wait. */
const MIGRATION_LOCK_ID = 7_294_310_551;

/** How long opening a PostgreSQL connection may take before the statement waiting for it fails (503). */
export const CONNECT_TIMEOUT_MS = 2000;

/**
 * How long a process waits at boot for a PostgreSQL that does not answer yet: in Compose or Kubernetes it may start
 * after the service.
 */
const BOOT_CONNECT_ATTEMPTS = 10;
const BOOT_CONNECT_RETRY_DELAY_MS = 3000;

/** PostgreSQL did not take a connection at `address` (host and port: never the password). */
export class DatabaseUnreachableError extends Error {
  constructor(
    readonly address: string,
    readonly reason: string,
    options: ErrorOptions,
  ) {
    super(
      `Cannot connect to PostgreSQL at ${address} (${reason}). Check DATABASE_URL and that the server is running and ` +
        'takes connections from here.',
      options,
    );
    this.name = 'DatabaseUnreachableError';
  }
}

/**
 * Opens one connection to PostgreSQL and closes it, so that one that cannot be reached is named plainly (with the
 * host and port tried, never the password) within CONNECT_TIMEOUT_MS, in the driver's words only as the reason.
 * A command fails at once on it; a service waits (`waitForDatabase`).
 */
export async function assertDatabaseReachable(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
  client.on('error', () => {});
  try {
    await client.connect();
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new DatabaseUnreachableError(`${client.host}:${client.port}`, reason, { cause: error });
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * Waits at boot until PostgreSQL takes a connection, logging each failed try; past BOOT_CONNECT_ATTEMPTS it rejects
 * with the last try's `DatabaseUnreachableError`.
 */
export async function waitForDatabase(url: string, logger: LoggerService): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await assertDatabaseReachable(url);
    } catch (error) {
      if (!(error instanceof DatabaseUnreachableError) || attempt === BOOT_CONNECT_ATTEMPTS) throw error;
      logger.warn(
        `Waiting for PostgreSQL at ${error.address} (${error.reason}): try ${attempt} of ${BOOT_CONNECT_ATTEMPTS}, ` +
          `the next in ${BOOT_CONNECT_RETRY_DELAY_MS / 1000} s`,
        'Database',
      );
      await setTimeout(BOOT_CONNECT_RETRY_DELAY_MS);
    }
  }
}

/**
 * A statement with its values. A `name` makes it a prepared statement: each connection parses and plans it once,
 * and later runs send only the values (for statements run on every request).
 */
export interface SqlStatement {
  text: string;
  values: unknown[];
  name?: string;
}

/** Entities are not listed here: each feature module registers its own (`TypeOrmModule.forFeature`). */
export function dataSourceOptions(url: string, poolSize: number): DataSourceOptions {
  return {
    type: 'postgres',
    url,
    migrations: MIGRATIONS,
    migrationsTableName: 'migrations',
    synchronize: false,
    migrationsRun: false,
    logging: false,
    extra: { max: poolSize, connectionTimeoutMillis: CONNECT_TIMEOUT_MS },
  };
}

/** Applies pending migrations while holding a PostgreSQL advisory lock, so replicas can start together. */
export async function migrateUnderLock(dataSource: DataSource): Promise<string[]> {
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  try {
    await runner.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_ID]);
    try {
      const applied = await dataSource.runMigrations({ transaction: 'each' });
      return applied.map((migration) => migration.name);
    } finally {
      await runner.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_ID]);
    }
  } finally {
    await runner.release();
  }
}
