import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Per-user item counts by status and generation type, maintained by a trigger in the same transaction as
 * every insert, status change and delete of a history item, so they are exact at every commit.
 */
export class HistoryCounts1795296939184 implements MigrationInterface {
  name = 'HistoryCounts1795296939184';

  async up(db: QueryRunner): Promise<void> {
    await db.query(`
      CREATE TABLE "history_counts" (
        "user_id" uuid NOT NULL,
        "status" text NOT NULL,
        "generation_type" text NOT NULL,
        "count" bigint NOT NULL,
        CONSTRAINT "PK_history_counts" PRIMARY KEY ("user_id", "status", "generation_type"),
        CONSTRAINT "FK_98f8a3c5f734ed6ffaa94672322" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE
      )`);
    await db.query(`
      INSERT INTO history_counts (user_id, status, generation_type, count)
      SELECT user_id, status, generation_type, count(*) FROM history_items GROUP BY 1, 2, 3`);
    await db.query(`
      CREATE FUNCTION history_counts_track() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
          UPDATE history_counts SET count = count - 1
           WHERE user_id = OLD.user_id AND status = OLD.status AND generation_type = OLD.generation_type;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
          INSERT INTO history_counts (user_id, status, generation_type, count)
          VALUES (NEW.user_id, NEW.status, NEW.generation_type, 1)
          ON CONFLICT (user_id, status, generation_type) DO UPDATE SET count = history_counts.count + 1;
        END IF;
        RETURN NULL;
      END $$`);
    await db.query(`
      CREATE TRIGGER history_counts_track
      AFTER INSERT OR DELETE OR UPDATE OF user_id, status, generation_type ON history_items
      FOR EACH ROW EXECUTE FUNCTION history_counts_track()`);
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query(`DROP TRIGGER history_counts_track ON history_items`);
    await db.query(`DROP FUNCTION history_counts_track()`);
    await db.query(`DROP TABLE history_counts`);
  }
}
