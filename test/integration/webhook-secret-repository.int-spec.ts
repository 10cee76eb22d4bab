import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { AUTH_ENTITIES } from '../../src/auth/auth.module.js';
import { dataSourceOptions, migrateUnderLock } from '../../src/database/data-source.js';
import { Database } from '../../src/database/database.js';
import { StatementPipeline } from '../../src/database/statement-pipeline.js';
import { JOB_ENTITIES } from '../../src/jobs/jobs.module.js';
import { WebhookSecretRepository } from '../../src/webhooks/webhook-secret.repository.js';
import { WEBHOOK_ENTITIES } from '../../src/webhooks/webhooks.module.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';

const ROUNDS = 40;
const ASKING_AT_ONCE = 4;

describe('WebhookSecretRepository on a real PostgreSQL', () => {
  let env: TestEnvironment;
  let dataSource: DataSource;
  let pipeline: StatementPipeline;
  let sut: WebhookSecretRepository;

  beforeAll(async () => {
    env = await createTestEnvironment();
    dataSource = await new DataSource({
      ...dataSourceOptions(env.databaseUrl, ASKING_AT_ONCE),
      entities: [...AUTH_ENTITIES, ...JOB_ENTITIES, ...WEBHOOK_ENTITIES],
    }).initialize();
    await migrateUnderLock(dataSource);
    pipeline = new StatementPipeline(env.databaseUrl, 1);
    sut = new WebhookSecretRepository(new Database(dataSource, pipeline, true));
  }, 30_000);

  afterAll(async () => {
    await pipeline?.onApplicationShutdown();
    if (dataSource?.isInitialized) await dataSource.destroy();
    await env?.dispose();
  }, 30_000);

  // The API (GET /user/webhook-secret) and a worker signing the user's first webhook ask at the same moment.
  it("gives everyone who asks at once for a new user's secret the same one, the one kept", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const userId = randomUUID();
      await dataSource.query('INSERT INTO users (id, name) VALUES ($1, $2)', [userId, `user-${round}`]);

      const secrets = await Promise.all(
        Array.from({ length: ASKING_AT_ONCE }, (_, asker) => sut.current(userId, `secret-${round}-${asker}`)),
      );

      const [kept] = await dataSource.query<{ secret: string }[]>(
        'SELECT secret FROM webhook_secrets WHERE user_id = $1',
        [userId],
      );
      expect(secrets).toEqual(Array.from({ length: ASKING_AT_ONCE }, () => kept.secret));
    }
  }, 60_000);
});
