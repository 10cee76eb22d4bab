import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Seeds and variants: each item's `seed` (as sent; null: drawn when its route takes one) and `num_outputs`, the seed
 * of each result once complete (`output_seeds`, one per result), and a `create_history_item` that takes the two.
 * The one of Webhooks1795310000000 stays beside it (a function of other arguments) for whatever calls it still.
 */
export class SeedsAndOutputs1795360000000 implements MigrationInterface {
  name = 'SeedsAndOutputs1795360000000';

  async up(db: QueryRunner): Promise<void> {
    await db.query(`ALTER TABLE "history_items" ADD "seed" bigint`);
    await db.query(`ALTER TABLE "history_items" ADD "num_outputs" smallint NOT NULL DEFAULT '1'`);
    await db.query(`ALTER TABLE "history_items" ADD "output_seeds" jsonb`);
    await db.query(
      `ALTER TABLE "history_items" ADD CONSTRAINT "history_items_seed_check" CHECK ("seed" BETWEEN 0 AND 4294967295)`,
    );
    await db.query(
      `ALTER TABLE "history_items" ADD CONSTRAINT "history_items_num_outputs_check" CHECK ("num_outputs" BETWEEN 1 AND 4)`,
    );
    await db.query(`
      CREATE FUNCTION create_history_item(
        p_id uuid, p_user_id uuid, p_tool text, p_generation_type text, p_inputs jsonb, p_texts jsonb, p_max_pending int,
        p_webhook_url text, p_seed bigint, p_num_outputs smallint
      ) RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_advisory_xact_lock(hashtext(p_user_id::text));
        IF (SELECT coalesce(sum(count), 0) FROM history_counts
             WHERE user_id = p_user_id AND status = 'pending') >= p_max_pending THEN
          RETURN false;
        END IF;
        INSERT INTO history_items (id, user_id, tool, generation_type, inputs, texts, webhook_url, webhook_state, seed,
                                   num_outputs)
        VALUES (p_id, p_user_id, p_tool, p_generation_type, p_inputs, p_texts, p_webhook_url,
                CASE WHEN p_webhook_url IS NULL THEN NULL ELSE 'pending' END, p_seed, p_num_outputs);
        RETURN true;
      END $$`);
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query(
      'DROP FUNCTION create_history_item(uuid, uuid, text, text, jsonb, jsonb, int, text, bigint, smallint)',
    );
    await db.query(`ALTER TABLE "history_items" DROP CONSTRAINT "history_items_num_outputs_check"`);
    await db.query(`ALTER TABLE "history_items" DROP CONSTRAINT "history_items_seed_check"`);
    for (const column of ['output_seeds', 'num_outputs', 'seed']) {
      await db.query(`ALTER TABLE "history_items" DROP COLUMN "${column}"`);
    }
  }
}
