import { Global, Logger, Module, type OnApplicationShutdown } from '@nestjs/common';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { AppConfig } from '../config/config.js';
import { dataSourceOptions, migrateUnderLock } from './data-source.js';
import { Database } from './database.js';
import { EmbeddedDatabase } from './embedded.js';
import { StatementPipeline } from './statement-pipeline.js';

/**
 * The embedded database runs one statement at a time, whatever number of connections reach it: more than a few buy
 * nothing.
 */
const EMBEDDED_POOL_SIZE = 3;
const EMBEDDED_PIPELINE_CONNECTIONS = 1;

/** Holds the embedded database when DATABASE_URL is unset; empty otherwise. */
export class DatabaseLocation implements OnApplicationShutdown {
  constructor(
    readonly url: string,
    readonly embedded: EmbeddedDatabase | undefined,
  ) {}

  async onApplicationShutdown(): Promise<void> {
    await this.embedded?.stop();
  }
}

const databaseLocation = {
  provide: DatabaseLocation,
  inject: [AppConfig],
  useFactory: async (config: AppConfig): Promise<DatabaseLocation> => {
    if (config.databaseUrl) return new DatabaseLocation(config.databaseUrl, undefined);
    const embedded = await EmbeddedDatabase.start(config.embeddedDbDir, config.embeddedDbPort);
    new Logger('Database').log(`Using the embedded PostgreSQL (PGlite) in ${config.embeddedDbDir}`);
    return new DatabaseLocation(embedded.url, embedded);
  },
};

@Module({ providers: [databaseLocation], exports: [databaseLocation] })
class DatabaseLocationModule {}

const statementPipeline = {
  provide: StatementPipeline,
  inject: [AppConfig, DatabaseLocation],
  useFactory: (config: AppConfig, location: DatabaseLocation) =>
    new StatementPipeline(
      location.url,
      location.embedded ? EMBEDDED_PIPELINE_CONNECTIONS : config.dbPipelineConnections,
    ),
};

const database = {
  provide: Database,
  inject: [getDataSourceToken(), StatementPipeline, DatabaseLocation],
  useFactory: (dataSource: DataSource, pipeline: StatementPipeline, location: DatabaseLocation) =>
    new Database(dataSource, pipeline, location.embedded === undefined),
};

@Global()
@Module({
  imports: [
    DatabaseLocationModule,
    TypeOrmModule.forRootAsync({
      imports: [DatabaseLocationModule],
      inject: [AppConfig, DatabaseLocation],
      useFactory: (config: AppConfig, location: DatabaseLocation) => ({
        ...dataSourceOptions(
          location.url,
          location.embedded ? Math.min(config.dbPoolSize, EMBEDDED_POOL_SIZE) : config.dbPoolSize,
        ),
        autoLoadEntities: true,
        // No retries of its own: a service waited for PostgreSQL before booting (waitForDatabase), a command checked
        // it (assertDatabaseReachable), and a failed migration is not mended by running it again.
        toRetry: () => false,
      }),
      dataSourceFactory: async (options) => {
        const dataSource = await new DataSource(options!).initialize();
        const applied = await migrateUnderLock(dataSource);
        if (applied.length > 0) new Logger('Database').log(`Applied migrations: ${applied.join(', ')}`);
        return dataSource;
      },
    }),
  ],
  providers: [statementPipeline, database],
  exports: [DatabaseLocationModule, database],
})
export class DatabaseModule {}
