import { Injectable } from '@nestjs/common';
import type { SqlStatement } from '../database/data-source.js';
import { Database } from '../database/database.js';
import type { HistoryItem, JobErrorCode, JobStatus, WebhookState } from './history-item.entity.js';

/** What a new item is made of; the rest of its columns start at their defaults (pending, now). */
export type NewHistoryItem = Pick<
  HistoryItem,
  | 'id'
  | 'userId'
  | 'tool'
  | 'generationType'
  | 'inputs'
  | 'texts'
  | 'webhookUrl'
  | 'webhookEvents'
  | 'seed'
  | 'numOutputs'
>;

/** An item as clients see it: the fields a `HistoryItemDto` is made from, named as on the entity. */
export type HistoryItemRow = Pick<
  HistoryItem,
  | 'id'
  | 'tool'
  | 'generationType'
  | 'status'
  | 'like'
  | 'errorCode'
  | 'errorMessage'
  | 'createdAt'
  | 'updatedAt'
  | 'completedAt'
  | 'startedAt'
  | 'webhookUrl'
  | 'webhookState'
  | 'webhookAttempts'
  | 'webhookLastAttemptAt'
  | 'webhookLastStatus'
  | 'outputSeeds'
>;

/** What a worker needs to run an item's job. */
export type JobRow = Pick<
  HistoryItem,
  'id' | 'userId' | 'tool' | 'generationType' | 'status' | 'inputs' | 'texts' | 'seed' | 'numOutputs'
>;

/** What ending or removing an item leaves to clean up: its inputs, whose it was, and its engine's run. */
export type EndedRow = Pick<HistoryItem, 'id' | 'userId' | 'tool' | 'generationType' | 'status' | 'inputs'>;

/** A user's jobs of one month with one tool, and how many of them ended complete or in error. */
export interface ToolUsageRow {
  tool: string;
  jobs: number;
  complete: number;
  error: number;
}

export interface HistoryQuery {
  page: number;
  limit: number;
  status?: JobStatus;
  generationType?: string;
}

/** The columns of a `HistoryItemRow`, read from `history_items` aliased `h`. */
const ITEM_COLUMNS = `h.id, h.tool, h.generation_type AS "generationType", h.status, h."like",
       h.error_code AS "errorCode", h.error_message AS "errorMessage",
       h.created_at AS "createdAt", h.updated_at AS "updatedAt", h.completed_at AS "completedAt",
       h.webhook_url AS "webhookUrl", h.webhook_state AS "webhookState", h.webhook_attempts AS "webhookAttempts",
       h.webhook_last_attempt_at AS "webhookLastAttemptAt", h.webhook_last_status AS "webhookLastStatus",
       h.started_at AS "startedAt", h.output_seeds AS "outputSeeds"`;

const ENDED_COLUMNS = `id, user_id AS "userId", tool, generation_type AS "generationType", status, inputs`;

/**
 * Every statement on the job tables (`history_items`, and `history_counts` that triggers keep), and the only place
 * they are written. The status changes here are guarded by the current status; `JobLifecycle` is their one caller.
 */
@Injectable()
export class HistoryRepository {
  constructor(private readonly db: Database) {}

  /**
   * Inserts the item unless its user already has `maxPending` pending items (atomically, under a per-user lock: see
   * the `create_history_item` migration). Resolves false when the limit refused it.
   */
  async createWithinPendingLimit(item: NewHistoryItem, maxPending: number): Promise<boolean> {
    const [{ created }] = await this.db.query<{ created: boolean }>({
      name: 'create-history-item',
      text: 'SELECT create_history_item($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) AS created',
      values: [
        item.id,
        item.userId,
        item.tool,
        item.generationType,
        item.inputs,
        item.texts,
        maxPending,
        item.webhookUrl,
        item.webhookEvents,
        item.seed,
        item.numOutputs,
      ],
    });
    return created;
  }

  /** One item of a user's, by id: the statement clients poll most of all. */
  async findOwned(userId: string, id: string): Promise<HistoryItemRow | undefined> {
    const [row] = await this.db.read<HistoryItemRow>({
      name: 'history-item',
      text: `SELECT ${ITEM_COLUMNS} FROM history_items h WHERE h.id = $1 AND h.user_id = $2`,
      values: [id, userId],
    });
    return row;
  }

  /** The item's status; undefined when it has no row. */
  async statusOf(id: string): Promise<JobStatus | undefined> {
    const [row] = await this.db.query<{ status: JobStatus }>({
      text: `SELECT status FROM history_items WHERE id = $1`,
      values: [id],
    });
    return row?.status;
  }

  /**
   * The item a job is for, and whether it was created more than `deadlineSeconds` ago (by the database's clock, the
   * one the reconciler's sweep reads).
   */
  async findJob(id: string, deadlineSeconds: number): Promise<(JobRow & { overdue: boolean }) | undefined> {
    const [row] = await this.db.query<JobRow & { overdue: boolean }>({
      text: `SELECT id, user_id AS "userId", tool, generation_type AS "generationType", status, inputs, texts,
                    seed::float8 AS seed, num_outputs AS "numOutputs",
                    created_at < now() - make_interval(secs => $2) AS overdue
               FROM history_items WHERE id = $1`,
      values: [id, deadlineSeconds],
    });
    return row;
  }

  /** One page of a user's history, newest first, ties by id, and the number of items the filters match. */
  async list(userId: string, query: HistoryQuery): Promise<{ rows: HistoryItemRow[]; total: number }> {
    const statements = historyListStatements(userId, query);
    const [rows, [{ total }]] = await Promise.all([
      this.db.query<HistoryItemRow>(statements.page),
      this.db.query<{ total: number }>(statements.count),
    ]);
    return { rows, total };
  }

  /** Sets the like of a complete item; resolves the item's status when it is not complete, undefined when missing. */
  async setLike(userId: string, id: string, like: boolean | null): Promise<'updated' | JobStatus | undefined> {
    const updated = await this.db.query({
      text: `UPDATE history_items SET "like" = $3, updated_at = now()
              WHERE id = $1 AND user_id = $2 AND status = 'complete' RETURNING id`,
      values: [id, userId, like],
    });
    if (updated.length > 0) return 'updated';
    const [row] = await this.db.query<{ status: JobStatus }>({
      text: 'SELECT status FROM history_items WHERE id = $1 AND user_id = $2',
      values: [id, userId],
    });
    return row?.status;
  }

  /**
   * Marks the item complete if it is still pending: one short update, taken after its outputs were written. Resolves
   * undefined when it is gone or already final.
   */
  async completeWhilePending(id: string, outputSeeds: readonly (number | null)[]): Promise<EndedRow | undefined> {
    const [row] = await this.db.query<EndedRow>({
      text: `UPDATE history_items SET status = 'complete', completed_at = now(), updated_at = now(), output_seeds = $2
              WHERE id = $1 AND status = 'pending' RETURNING ${ENDED_COLUMNS}`,
      values: [id, JSON.stringify(outputSeeds)],
    });
    return row;
  }

  /**
   * Records that a worker began running the item's job, if it is pending and had not started before (a retry keeps
   * its first start). Resolves the item's owner when this was its start, undefined otherwise.
   */
  async markStarted(id: string): Promise<{ userId: string } | undefined> {
    const [row] = await this.db.query<{ userId: string }>({
      name: 'mark-started',
      text: `UPDATE history_items SET started_at = clock_timestamp()
              WHERE id = $1 AND status = 'pending' AND started_at IS NULL RETURNING user_id AS "userId"`,
      values: [id],
    });
    return row;
  }

  /** The item's job if it is pending and has not started: what its place in its engine's line is kept by. */
  async notStarted(id: string): Promise<Pick<HistoryItem, 'userId' | 'tool' | 'generationType'> | undefined> {
    const [row] = await this.db.query<Pick<HistoryItem, 'userId' | 'tool' | 'generationType'>>({
      text: `SELECT user_id AS "userId", tool, generation_type AS "generationType" FROM history_items
              WHERE id = $1 AND status = 'pending' AND started_at IS NULL`,
      values: [id],
    });
    return row;
  }

  /** Marks the item `error` if it is still pending; resolves undefined when it is gone or already final. */
  async failWhilePending(id: string, code: JobErrorCode, message: string): Promise<EndedRow | undefined> {
    const [row] = await this.db.query<EndedRow>({
      text: `UPDATE history_items
                SET status = 'error', error_code = $2, error_message = $3, completed_at = now(), updated_at = now()
              WHERE id = $1 AND status = 'pending' RETURNING ${ENDED_COLUMNS}`,
      values: [id, code, message],
    });
    return row;
  }

  /**
   * Marks a user's item `error` if it is still pending; resolves the ended row, or the item's status when it is
   * already final, or undefined when the user has no such item.
   */
  async failOwnedWhilePending(
    userId: string,
    id: string,
    code: JobErrorCode,
    message: string,
  ): Promise<EndedRow | JobStatus | undefined> {
    const [row] = await this.db.query<EndedRow>({
      text: `UPDATE history_items
                SET status = 'error', error_code = $3, error_message = $4, completed_at = now(), updated_at = now()
              WHERE id = $1 AND user_id = $2 AND status = 'pending' RETURNING ${ENDED_COLUMNS}`,
      values: [id, userId, code, message],
    });
    if (row) return row;
    const [current] = await this.db.query<{ status: JobStatus }>({
      text: 'SELECT status FROM history_items WHERE id = $1 AND user_id = $2',
      values: [id, userId],
    });
    return current?.status;
  }

  /** Deletes a user's item; resolves what it was, or undefined when there was none. */
  async deleteOwned(userId: string, id: string): Promise<EndedRow | undefined> {
    const [row] = await this.db.query<EndedRow>({
      text: `DELETE FROM history_items WHERE id = $1 AND user_id = $2 RETURNING ${ENDED_COLUMNS}`,
      values: [id, userId],
    });
    return row;
  }

  /** Some of a user's items, pending ones first (a user's removal takes them batch by batch). */
  async someOf(userId: string, limit: number): Promise<Pick<HistoryItem, 'id' | 'status'>[]> {
    return this.db.query<Pick<HistoryItem, 'id' | 'status'>>({
      text: `SELECT id, status FROM history_items WHERE user_id = $1
              ORDER BY status <> 'pending', created_at LIMIT $2`,
      values: [userId, limit],
    });
  }

  /** Whose an item is and how it stands, for serving its results: they are served only while the row exists. */
  async mediaOwner(id: string): Promise<Pick<HistoryItem, 'userId' | 'status'> | undefined> {
    const [row] = await this.db.read<Pick<HistoryItem, 'userId' | 'status'>>({
      name: 'media-owner',
      text: 'SELECT user_id AS "userId", status FROM history_items WHERE id = $1',
      values: [id],
    });
    return row;
  }

  /** An item with its owner and the webhook messages it wants, for its webhook: whoever's it is. */
  async findWithOwner(
    id: string,
  ): Promise<(HistoryItemRow & Pick<HistoryItem, 'userId' | 'webhookEvents'>) | undefined> {
    const [row] = await this.db.query<HistoryItemRow & Pick<HistoryItem, 'userId' | 'webhookEvents'>>({
      text: `SELECT ${ITEM_COLUMNS}, h.user_id AS "userId", h.webhook_events AS "webhookEvents"
               FROM history_items h WHERE h.id = $1`,
      values: [id],
    });
    return row;
  }

  /** Records one delivery attempt of the item's webhook and the state it leaves the delivery in. */
  async recordWebhookAttempt(id: string, state: WebhookState, status: number | null): Promise<void> {
    await this.db.query({
      text: `UPDATE history_items
                SET webhook_state = $2, webhook_attempts = webhook_attempts + 1,
                    webhook_last_attempt_at = clock_timestamp(), webhook_last_status = $3
              WHERE id = $1 AND webhook_url IS NOT NULL`,
      values: [id, state, status],
    });
  }

  /**
   * Final items whose webhook message is still to be delivered, ended more than `seconds` ago: the outbox the
   * reconciler queues lost messages again from (queueing one already queued changes nothing).
   */
  async awaitingWebhook(seconds: number, limit: number): Promise<{ id: string; status: JobStatus }[]> {
    return this.db.query<{ id: string; status: JobStatus }>({
      text: `SELECT id, status FROM history_items
              WHERE webhook_state = 'pending' AND status <> 'pending'
                AND completed_at < now() - make_interval(secs => $1)
              ORDER BY completed_at LIMIT $2`,
      values: [seconds, limit],
    });
  }

  /** The oldest final items, ended more than `seconds` ago (partial index on final items by completed_at). */
  async finalEndedBefore(seconds: number, limit: number): Promise<EndedRow[]> {
    return this.db.query<EndedRow>({
      text: `SELECT ${ENDED_COLUMNS} FROM history_items
              WHERE status <> 'pending' AND completed_at < now() - make_interval(secs => $1)
              ORDER BY completed_at LIMIT $2`,
      values: [seconds, limit],
    });
  }

  /** Deletes those of the items that are final; resolves the ones deleted (not already gone). */
  async deleteFinal(ids: readonly string[]): Promise<EndedRow[]> {
    return this.db.query<EndedRow>({
      text: `DELETE FROM history_items WHERE id = ANY($1::uuid[]) AND status <> 'pending' RETURNING ${ENDED_COLUMNS}`,
      values: [ids],
    });
  }

  /** Those of these items that may have result files: pending (being written) or complete; the rest have none. */
  async keepingOutputsAmong(ids: readonly string[]): Promise<string[]> {
    const rows = await this.db.query<{ id: string }>({
      text: `SELECT id FROM history_items WHERE id = ANY($1::uuid[]) AND status IN ('pending', 'complete')`,
      values: [ids],
    });
    return rows.map((row) => row.id);
  }

  /**
   * The ids of the oldest pending items created more than `seconds` ago and, with `notOlderThan`, at most that many
   * seconds ago (partial index on pending).
   */
  async pendingOlderThan(seconds: number, limit: number, notOlderThan?: number): Promise<string[]> {
    const rows = await this.db.query<{ id: string }>({
      text: `SELECT id FROM history_items
              WHERE status = 'pending' AND created_at < now() - make_interval(secs => $1)
                AND ($3::float8 IS NULL OR created_at >= now() - make_interval(secs => $3))
              ORDER BY created_at LIMIT $2`,
      values: [seconds, limit, notOlderThan ?? null],
    });
    return rows.map((row) => row.id);
  }

  /** Those of these items that are pending; an id with no row is left out. */
  async pendingAmong(ids: readonly string[]): Promise<string[]> {
    const rows = await this.db.read<{ id: string }>({
      text: `SELECT id FROM history_items WHERE id = ANY($1::uuid[]) AND status = 'pending'`,
      values: [ids],
    });
    return rows.map((row) => row.id);
  }

  /** How many of the user's items are pending, from the trigger-kept counts. */
  async pendingCount(userId: string): Promise<number> {
    const [{ pending }] = await this.db.read<{ pending: number }>({
      name: 'pending-count',
      text: `SELECT coalesce(sum(count), 0)::int AS pending FROM history_counts WHERE user_id = $1 AND status = 'pending'`,
      values: [userId],
    });
    return pending;
  }

  /** The user's jobs of the calendar month (UTC) that began at `periodStart`, by tool, from the trigger-kept rows. */
  async monthUsage(userId: string, periodStart: Date): Promise<ToolUsageRow[]> {
    return this.db.read<ToolUsageRow>({
      name: 'month-usage',
      text: `SELECT tool, jobs::int, complete::int, error::int FROM usage_months
              WHERE user_id = $1 AND period_start = $2::date ORDER BY tool`,
      values: [userId, periodStart.toISOString().slice(0, 10)],
    });
  }

  /**
   * How long the oldest pending item has been pending, in seconds; 0 when none is (partial index on pending). Read at
   * each scrape of every process: through the pool, so that a worker opens no statement pipeline for its metrics.
   */
  async oldestPendingSeconds(): Promise<number> {
    const [row] = await this.db.query<{ seconds: number | null }>({
      text: `SELECT extract(epoch FROM now() - min(created_at))::float8 AS seconds
               FROM history_items WHERE status = 'pending'`,
      values: [],
    });
    return row?.seconds ?? 0;
  }
}

/**
 * The two statements behind one page of a user's history (exported for the test of the plans they get).
 *
 * The page is found on the index that matches the filters (`history_items_user[_status][_type]_created`, walked
 * backwards) reading only the index's own columns, and just the rows of the page are then fetched by primary key:
 * deep pages skip over index entries instead of fetching and sorting every row of the user. The total comes from the
 * trigger-kept counts: a few rows, however long the user's history is.
 */
export function historyListStatements(
  userId: string,
  query: HistoryQuery,
): { page: SqlStatement; count: SqlStatement } {
  const values: unknown[] = [userId];
  const conditions = ['user_id = $1'];
  if (query.status) {
    values.push(query.status);
    conditions.push(`status = $${values.length}`);
  }
  if (query.generationType) {
    values.push(query.generationType);
    conditions.push(`generation_type = $${values.length}`);
  }
  const where = conditions.join(' AND ');
  return {
    page: {
      text: `SELECT ${ITEM_COLUMNS}
               FROM (SELECT id, created_at FROM history_items
                      WHERE ${where}
                      ORDER BY created_at DESC, id DESC
                      LIMIT $${values.length + 1} OFFSET $${values.length + 2}) AS page
               JOIN history_items h ON h.id = page.id
              ORDER BY page.created_at DESC, page.id DESC`,
      values: [...values, query.limit, (query.page - 1) * query.limit],
    },
    count: { text: `SELECT coalesce(sum(count), 0)::int AS total FROM history_counts WHERE ${where}`, values },
  };
}
