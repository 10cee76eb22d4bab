import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The operators' controls: an admin key opens the admin pages (the queue board) besides everything a key opens, and a
 * user's own limits replace the service's defaults (`LIMIT_MAX_PENDING`, `LIMIT_CREATIONS_PER_MINUTE`) where set.
 */
export class AdminKeysAndUserLimits1795330000000 implements MigrationInterface {
  name = 'AdminKeysAndUserLimits1795330000000';

  async up(db: QueryRunner): Promise<void> {
    await db.query(`ALTER TABLE "api_keys" ADD "admin" boolean NOT NULL DEFAULT false`);
    await db.query(`ALTER TABLE "users" ADD "max_pending" integer`);
    await db.query(`ALTER TABLE "users" ADD "creations_per_minute" integer`);
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query(`ALTER TABLE "users" DROP COLUMN "creations_per_minute"`);
    await db.query(`ALTER TABLE "users" DROP COLUMN "max_pending"`);
    await db.query(`ALTER TABLE "api_keys" DROP COLUMN "admin"`);
  }
}
