import { Global, Logger, Module, type OnApplicationShutdown } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { AppConfig } from '../config/config.js';
import { dataSourceOptions, migrateUnderLock } from './data-source.js';
import { EmbeddedDatabase } from './embedded.js';
import { StatementPipeline } from './statement-pipeline.js';

/** Of the few connections the embedded database serves, the statement pipeline takes one and the pool the rest. */
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
export class DatabaseLocationModule {}

const statementPipeline = {
  provide: StatementPipeline,
  inject: [AppConfig, DatabaseLocation],
  useFactory: (config: AppConfig, location: DatabaseLocation) =>
    new StatementPipeline(
      location.url,
      location.embedded ? EMBEDDED_PIPELINE_CONNECTIONS : config.dbPipelineConnections,
    ),
};

@Global()
@Module({
  imports: [
    DatabaseLocationModule,
    TypeOrmModule.forRootAsync({
      imports: [DatabaseLocationModule],
      inject: [AppConfig, DatabaseLocation],
      useFactory: (config: AppConfig, location: DatabaseLocation) =>
        dataSourceOptions(
          location.url,
          location.embedded
            ? Math.min(config.dbPoolSize, EmbeddedDatabase.MAX_CONNECTIONS - EMBEDDED_PIPELINE_CONNECTIONS)
            : config.dbPoolSize,
        ),
      dataSourceFactory: async (options) => {
        const dataSource = await new DataSource(options!).initialize();
        const applied = await migrateUnderLock(dataSource);
        if (applied.length > 0) new Logger('Database').log(`Applied migrations: ${applied.join(', ')}`);
        return dataSource;
      },
    }),
  ],
  providers: [statementPipeline],
  exports: [DatabaseLocationModule, statementPipeline],
})
export class DatabaseModule {}
