import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Where a job is and what it tells (API.md, "A job as the best APIs show it"): when a worker began running it
 * (`started_at`), which webhook messages its receiver wants (`webhook_events`, null: the final state alone), taken by
 * `create_history_item` (otherwise as in Webhooks1795310000000), and each user's jobs per calendar month and tool,
 * kept by a trigger in the same transaction as the insert or status change, so `GET /user/usage` reads a few rows
 * and a deleted item still counts.
 */
export class JobView1795360000000 implements MigrationInterface {
  name = 'JobView1795360000000';

  async up(db: QueryRunner): Promise<void> {
    await db.query(`ALTER TABLE "history_items" ADD "started_at" TIMESTAMP WITH TIME ZONE`);
    await db.query(`ALTER TABLE "history_items" ADD "webhook_events" text array`);
    await db.query('DROP FUNCTION create_history_item(uuid, uuid, text, text, jsonb, jsonb, int, text)');
    await db.query(`
      CREATE FUNCTION create_history_item(
        p_id uuid, p_user_id uuid, p_tool text, p_generation_type text, p_inputs jsonb, p_texts jsonb, p_max_pending int,
        p_webhook_url text, p_webhook_events text[]
      ) RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_advisory_xact_lock(hashtext(p_user_id::text));
        IF (SELECT coalesce(sum(count), 0) FROM history_counts
             WHERE user_id = p_user_id AND status = 'pending') >= p_max_pending THEN
          RETURN false;
        END IF;
        INSERT INTO history_items (id, user_id, tool, generation_type, inputs, texts, webhook_url, webhook_state,
                                   webhook_events)
        VALUES (p_id, p_user_id, p_tool, p_generation_type, p_inputs, p_texts, p_webhook_url,
                CASE WHEN p_webhook_url IS NULL THEN NULL ELSE 'pending' END, p_webhook_events);
        RETURN true;
      END $$`);
    await db.query(`
      CREATE TABLE "usage_months" (
        "user_id" uuid NOT NULL,
        "period_start" date NOT NULL,
        "tool" text NOT NULL,
        "jobs" bigint NOT NULL DEFAULT '0',
        "complete" bigint NOT NULL DEFAULT '0',
        "error" bigint NOT NULL DEFAULT '0',
        CONSTRAINT "PK_usage_months" PRIMARY KEY ("user_id", "period_start", "tool"),
        CONSTRAINT "FK_usage_months_user" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE
      )`);
    await db.query(`
      INSERT INTO usage_months (user_id, period_start, tool, jobs, complete, error)
      SELECT user_id, date_trunc('month', created_at AT TIME ZONE 'UTC')::date, tool, count(*),
             count(*) FILTER (WHERE status = 'complete'), count(*) FILTER (WHERE status = 'error')
        FROM history_items GROUP BY 1, 2, 3`);
    // A job counts in the month it was created; its end counts there too, once, on its one change from pending.
    await db.query(`
      CREATE FUNCTION usage_months_track() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP = 'INSERT' THEN
          INSERT INTO usage_months (user_id, period_start, tool, jobs)
          VALUES (NEW.user_id, date_trunc('month', NEW.created_at AT TIME ZONE 'UTC')::date, NEW.tool, 1)
          ON CONFLICT (user_id, period_start, tool) DO UPDATE SET jobs = usage_months.jobs + 1;
        ELSIF OLD.status = 'pending' AND NEW.status <> 'pending' THEN
          UPDATE usage_months
             SET complete = complete + (NEW.status = 'complete')::int, error = error + (NEW.status = 'error')::int
           WHERE user_id = NEW.user_id AND period_start = date_trunc('month', NEW.created_at AT TIME ZONE 'UTC')::date
             AND tool = NEW.tool;
        END IF;
        RETURN NULL;
      END $$`);
    await db.query(`
      CREATE TRIGGER usage_months_track
      AFTER INSERT OR UPDATE OF status ON history_items
      FOR EACH ROW EXECUTE FUNCTION usage_months_track()`);
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query(`DROP TRIGGER usage_months_track ON history_items`);
    await db.query(`DROP FUNCTION usage_months_track()`);
    await db.query(`DROP TABLE "usage_months"`);
    await db.query('DROP FUNCTION create_history_item(uuid, uuid, text, text, jsonb, jsonb, int, text, text[])');
    await db.query(`
      CREATE FUNCTION create_history_item(
        p_id uuid, p_user_id uuid, p_tool text, p_generation_type text, p_inputs jsonb, p_texts jsonb, p_max_pending int,
        p_webhook_url text
      ) RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_advisory_xact_lock(hashtext(p_user_id::text));
        IF (SELECT coalesce(sum(count), 0) FROM history_counts
             WHERE user_id = p_user_id AND status = 'pending') >= p_max_pending THEN
          RETURN false;
        END IF;
        INSERT INTO history_items (id, user_id, tool, generation_type, inputs, texts, webhook_url, webhook_state)
        VALUES (p_id, p_user_id, p_tool, p_generation_type, p_inputs, p_texts, p_webhook_url,
                CASE WHEN p_webhook_url IS NULL THEN NULL ELSE 'pending' END);
        RETURN true;
      END $$`);
    await db.query(`ALTER TABLE "history_items" DROP COLUMN "webhook_events"`);
    await db.query(`ALTER TABLE "history_items" DROP COLUMN "started_at"`);
  }
}
