import { readdirSync, readFileSync } from 'node:fs';
import { DataSource, type ObjectType } from 'typeorm';
import { AUTH_ENTITIES } from './auth/auth.module.js';
import { FILE_ENTITIES } from './files/files.module.js';
import { JOB_ENTITIES } from './jobs/jobs.module.js';
import { USER_ENTITIES } from './users/users.module.js';
import { WEBHOOK_ENTITIES } from './webhooks/webhooks.module.js';

/** The entities whose tables each repository's statements read, by the repository's path under src/. */
const REPOSITORY_ENTITIES: Record<string, ObjectType<object>[]> = {
  'auth/api-key.repository.ts': AUTH_ENTITIES,
  'files/stored-file.repository.ts': FILE_ENTITIES,
  'jobs/history.repository.ts': JOB_ENTITIES,
  'webhooks/webhook-secret.repository.ts': WEBHOOK_ENTITIES,
  'users/user.repository.ts': USER_ENTITIES,
};

const SRC = new URL('./', import.meta.url);

/** Entity metadata as TypeORM builds it from the decorators, without connecting to a database. */
class EntityMetadataOnly extends DataSource {
  static async of(entities: ObjectType<object>[]): Promise<EntityMetadataOnly> {
    const dataSource = new EntityMetadataOnly({ type: 'postgres', entities });
    await dataSource.buildMetadatas();
    return dataSource;
  }

  /** `<column> AS "<property>"` for every column of the entities. */
  aliasesOf(entities: ObjectType<object>[]): Set<string> {
    return new Set(
      entities.flatMap((entity) =>
        this.getMetadata(entity).columns.map((column) => `${column.databaseName} AS "${column.propertyName}"`),
      ),
    );
  }
}

/**
 * Every `<column> AS "<alias>"` in a source file, the column unqualified (`h.status` is `status`) and unquoted. A
 * quoted alias is how a row gets an entity's camelCase property; computed values take plain ones (`AS total`).
 */
function quotedAliases(source: string): string[] {
  return [...source.matchAll(/(\S+)\s+AS\s+"(\w+)"/gi)].map(
    ([, column, alias]) => `${column.replace(/^\w+\./, '').replaceAll('"', '')} AS "${alias}"`,
  );
}

describe('repositories', () => {
  let schema: EntityMetadataOnly;

  beforeAll(async () => {
    // Every module's entities at once: relations reach across modules (a key's or a secret's user).
    schema = await EntityMetadataOnly.of(Object.values(REPOSITORY_ENTITIES).flat());
  });

  it('are all listed here', () => {
    const repositories = readdirSync(SRC, { recursive: true, encoding: 'utf8' }).filter((path) =>
      path.endsWith('.repository.ts'),
    );

    expect(repositories.sort()).toEqual(Object.keys(REPOSITORY_ENTITIES).sort());
  });

  it.each(Object.entries(REPOSITORY_ENTITIES))('%s aliases each column by its entity property', (path, entities) => {
    const sut = quotedAliases(readFileSync(new URL(path, SRC), 'utf8'));

    const entityAliases = schema.aliasesOf(entities);
    expect(sut).not.toHaveLength(0);
    expect(sut.filter((alias) => !entityAliases.has(alias))).toEqual([]);
  });
});
