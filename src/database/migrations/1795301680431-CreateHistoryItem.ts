import type { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Job creation in one statement: `create_history_item(...)` inserts the item unless its user already has
 * `p_max_pending` pending items, and says whether it did. It runs under a per-user advisory lock, so parallel
 * requests of one user cannot overshoot the limit, and counts from `history_counts` (a few rows, however many
 * items the user has). Each statement of a plpgsql function sees what was committed before it started, so
 * the count read once the lock is granted includes every creation that held the lock before. One round
 * trip: the lock is held for the function and its commit, not across the client's round trips.
 */
export class CreateHistoryItem1795301680431 implements MigrationInterface {
  name = 'CreateHistoryItem1795301680431';

  async up(db: QueryRunner): Promise<void> {
    await db.query(`
      CREATE FUNCTION create_history_item(
        p_id uuid, p_user_id uuid, p_tool text, p_generation_type text, p_inputs jsonb, p_texts jsonb, p_max_pending int
      ) RETURNS boolean LANGUAGE plpgsql AS $$
      BEGIN
        PERFORM pg_advisory_xact_lock(hashtext(p_user_id::text));
        IF (SELECT coalesce(sum(count), 0) FROM history_counts
             WHERE user_id = p_user_id AND status = 'pending') >= p_max_pending THEN
          RETURN false;
        END IF;
        INSERT INTO history_items (id, user_id, tool, generation_type, inputs, texts)
        VALUES (p_id, p_user_id, p_tool, p_generation_type, p_inputs, p_texts);
        RETURN true;
      END $$`);
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query('DROP FUNCTION create_history_item(uuid, uuid, text, text, jsonb, jsonb, int)');
  }
}
