import type { MigrationInterface, QueryRunner } from 'typeorm';

/** The insert of JobView1795360000000's `create_history_item`, with `seed` and `num_outputs` when `seeds` is set. */
function createHistoryItem(seeds: boolean): string {
  return `
      CREATE FUNCTION create_history_item(
        p_id uuid, p_user_id uuid, p_tool text, p_generation_type text, p_inputs jsonb, p_texts jsonb, p_max_pending int,
        p_webhook_url text, p_webhook_events text[]${seeds ? ', p_seed bigint, p_num_outputs smallint' : ''}
      ) RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_advisory_xact_lock(hashtext(p_user_id::text));
        IF (SELECT coalesce(sum(count), 0) FROM history_counts
             WHERE user_id = p_user_id AND status = 'pending') >= p_max_pending THEN
          RETURN false;
        END IF;
        INSERT INTO history_items (id, user_id, tool, generation_type, inputs, texts, webhook_url, webhook_state,
                                   webhook_events${seeds ? ', seed, num_outputs' : ''})
        VALUES (p_id, p_user_id, p_tool, p_generation_type, p_inputs, p_texts, p_webhook_url,
                CASE WHEN p_webhook_url IS NULL THEN NULL ELSE 'pending' END,
                p_webhook_events${seeds ? ', p_seed, p_num_outputs' : ''});
        RETURN true;
      END $$`;
}

/**
 * Seeds and variants: each item's `seed` (as sent; null: drawn when its route takes one) and `num_outputs`, the seed
 * of each result once complete (`output_seeds`, one per result), and a `create_history_item` that takes the two.
 */
export class SeedsAndOutputs1795370000000 implements MigrationInterface {
  name = 'SeedsAndOutputs1795370000000';

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
    await db.query('DROP FUNCTION create_history_item(uuid, uuid, text, text, jsonb, jsonb, int, text, text[])');
    await db.query(createHistoryItem(true));
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query(
      'DROP FUNCTION create_history_item(uuid, uuid, text, text, jsonb, jsonb, int, text, text[], bigint, smallint)',
    );
    await db.query(createHistoryItem(false));
    await db.query(`ALTER TABLE "history_items" DROP CONSTRAINT "history_items_num_outputs_check"`);
    await db.query(`ALTER TABLE "history_items" DROP CONSTRAINT "history_items_seed_check"`);
    for (const column of ['output_seeds', 'num_outputs', 'seed']) {
      await db.query(`ALTER TABLE "history_items" DROP COLUMN "${column}"`);
    }
  }
}
