import { DataSource } from 'typeorm';
import { AUTH_ENTITIES } from '../../src/auth/auth.module.js';
import { dataSourceOptions, MIGRATIONS, migrateUnderLock } from '../../src/database/data-source.js';
import { FILE_ENTITIES } from '../../src/files/files.module.js';
import { JOB_ENTITIES } from '../../src/jobs/jobs.module.js';
import { WEBHOOK_ENTITIES } from '../../src/webhooks/webhooks.module.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';

/** A fresh, empty database of its own for each test, on the test PostgreSQL server. */
describe('database migrations', () => {
  const environments: TestEnvironment[] = [];
  const dataSources: DataSource[] = [];

  beforeAll(async () => {
    environments.push(await createTestEnvironment(), await createTestEnvironment(), await createTestEnvironment());
  }, 60_000);

  afterAll(async () => {
    await Promise.all(dataSources.filter((d) => d.isInitialized).map((d) => d.destroy()));
    for (const env of environments) await env.dispose();
  }, 60_000);

  async function openDataSource(url: string): Promise<DataSource> {
    // Every module's entities: the schema they describe is the one the migrations make.
    const dataSource = new DataSource({
      ...dataSourceOptions(url, 2),
      entities: [...AUTH_ENTITIES, ...JOB_ENTITIES, ...WEBHOOK_ENTITIES, ...FILE_ENTITIES],
    });
    dataSources.push(dataSource);
    return dataSource.initialize();
  }

  it('entities and migrations agree', async () => {
    const sut = await openDataSource(environments[0].databaseUrl);
    await migrateUnderLock(sut);

    const pending = await sut.driver.createSchemaBuilder().log();

    const queries = pending.upQueries.map((query) => query.query);
    expect(queries).toEqual([]);
  }, 30_000);

  it('applies every migration on a fresh database, and nothing the second time', async () => {
    const sut = await openDataSource(environments[1].databaseUrl);

    const first = await migrateUnderLock(sut);
    const second = await migrateUnderLock(sut);

    expect(first).toEqual(MIGRATIONS.map((migration) => new migration().name));
    expect(second).toEqual([]);
  }, 30_000);

  it('lets two processes migrate the same fresh database at once', async () => {
    const url = environments[2].databaseUrl;
    const [a, b] = await Promise.all([openDataSource(url), openDataSource(url)]);

    const results = await Promise.allSettled([migrateUnderLock(a), migrateUnderLock(b)]);

    expect(results.map((result) => result.status)).toEqual(['fulfilled', 'fulfilled']);
    const applied = results.flatMap((result) => (result.status === 'fulfilled' ? result.value : []));
    expect(applied).toEqual(MIGRATIONS.map((migration) => new migration().name));
    const rows = await a.query('SELECT name FROM migrations');
    expect(rows).toHaveLength(MIGRATIONS.length);
    expect(await a.showMigrations()).toBe(false);
  }, 30_000);
});
