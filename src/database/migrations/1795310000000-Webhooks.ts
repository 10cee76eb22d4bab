import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Webhooks: the delivery state of each item's webhook (`webhook_url` given at creation), the per-user signing
 * secrets, and `create_history_item` taking the webhook URL (otherwise as in CreateHistoryItem1795301680431).
 */
export class Webhooks1795310000000 implements MigrationInterface {
  name = 'Webhooks1795310000000';

  async up(db: QueryRunner): Promise<void> {
    await db.query(`ALTER TABLE "history_items" ADD "webhook_url" text`);
    await db.query(`ALTER TABLE "history_items" ADD "webhook_state" text`);
    await db.query(`ALTER TABLE "history_items" ADD "webhook_attempts" integer NOT NULL DEFAULT '0'`);
    await db.query(`ALTER TABLE "history_items" ADD "webhook_last_attempt_at" TIMESTAMP WITH TIME ZONE`);
    await db.query(`ALTER TABLE "history_items" ADD "webhook_last_status" integer`);
    await db.query(
      `ALTER TABLE "history_items" ADD CONSTRAINT "history_items_webhook_check" CHECK (("webhook_url" IS NULL) = ("webhook_state" IS NULL))`,
    );
    await db.query(`
      CREATE TABLE "webhook_secrets" (
        "user_id" uuid NOT NULL,
        "secret" text NOT NULL,
        "previous_secret" text,
        "previous_until" TIMESTAMP WITH TIME ZONE,
        "rotated_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "PK_f70890b803f42f4acc1a975d8d1" PRIMARY KEY ("user_id"),
        CONSTRAINT "FK_f70890b803f42f4acc1a975d8d1" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE
      )`);
    await db.query('DROP FUNCTION create_history_item(uuid, uuid, text, text, jsonb, jsonb, int)');
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
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query('DROP FUNCTION create_history_item(uuid, uuid, text, text, jsonb, jsonb, int, text)');
    await db.query('DROP TABLE "webhook_secrets"');
    await db.query(`ALTER TABLE "history_items" DROP CONSTRAINT "history_items_webhook_check"`);
    for (const column of ['webhook_last_status', 'webhook_last_attempt_at', 'webhook_attempts', 'webhook_state']) {
      await db.query(`ALTER TABLE "history_items" DROP COLUMN "${column}"`);
    }
    await db.query(`ALTER TABLE "history_items" DROP COLUMN "webhook_url"`);
  }
}
