import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * A user's own share at once, over the service's defaults where set: uploads in progress (`LIMIT_CONCURRENT_UPLOADS`),
 * open event streams (`LIMIT_EVENT_STREAMS`) and held `Prefer: wait` requests (`LIMIT_HELD_REQUESTS`).
 */
export class ConcurrencyLimits1795345000000 implements MigrationInterface {
  name = 'ConcurrencyLimits1795345000000';

  async up(db: QueryRunner): Promise<void> {
    await db.query(`ALTER TABLE "users" ADD "concurrent_uploads" integer`);
    await db.query(`ALTER TABLE "users" ADD "event_streams" integer`);
    await db.query(`ALTER TABLE "users" ADD "held_requests" integer`);
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query(`ALTER TABLE "users" DROP COLUMN "held_requests"`);
    await db.query(`ALTER TABLE "users" DROP COLUMN "event_streams"`);
    await db.query(`ALTER TABLE "users" DROP COLUMN "concurrent_uploads"`);
  }
}
