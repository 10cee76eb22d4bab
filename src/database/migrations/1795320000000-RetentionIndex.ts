import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Final items by the time they ended: the retention sweep takes the oldest first (HISTORY_RETENTION), and the
 * reconciler's look for undelivered webhooks walks the same order. Pending items, which have no end, are left out.
 * An operator may have built it beforehand, CONCURRENTLY, so that the upgrade does not hold writes on a large table
 * while it builds (docs/operations.md, Retention): then it is kept.
 */
export class RetentionIndex1795320000000 implements MigrationInterface {
  name = 'RetentionIndex1795320000000';

  async up(db: QueryRunner): Promise<void> {
    await db.query(
      `CREATE INDEX IF NOT EXISTS "history_items_final_completed" ON "history_items" ("completed_at") WHERE "status" <> 'pending'`,
    );
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query(`DROP INDEX "history_items_final_completed"`);
  }
}
