import type { PreparedStatement, SqlStatement } from '../database/data-source.js';
import type { HistoryItem, JobStatus } from './history-item.entity.js';

export interface HistoryQuery {
  page: number;
  limit: number;
  status?: JobStatus;
  generationType?: string;
}

/** A row of the page statement: the fields a `HistoryItemDto` is made from, named as on the entity. */
export type HistoryListRow = Pick<
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
>;

/** The columns of a `HistoryListRow`, read from `history_items` aliased `h`. */
const ROW_COLUMNS = `h.id, h.tool, h.generation_type AS "generationType", h.status, h."like",
       h.error_code AS "errorCode", h.error_message AS "errorMessage",
       h.created_at AS "createdAt", h.updated_at AS "updatedAt", h.completed_at AS "completedAt"`;

/** One item of a user's history, by id; the most frequent query of all (clients poll it). */
export function historyItemSql(userId: string, id: string): PreparedStatement {
  return {
    name: 'history-item',
    text: `SELECT ${ROW_COLUMNS} FROM history_items h WHERE h.id = $1 AND h.user_id = $2`,
    values: [id, userId],
  };
}

/**
 * The two statements behind one page of a user's history, and the only place they are written.
 *
 * The page is found on the index that matches the filters (`history_items_user[_status][_type]_created`,
 * walked backwards: newest first, ties by id) reading only the index's own columns, and just the rows of
 * the page are then fetched by primary key. Deep pages thus skip over index entries instead of fetching
 * and sorting every row of the user.
 */
export function historyListSql(userId: string, query: HistoryQuery): { page: SqlStatement; count: SqlStatement } {
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
  const limit = values.length + 1;
  const offset = values.length + 2;
  return {
    page: {
      text: `SELECT ${ROW_COLUMNS}
         FROM (SELECT id, created_at FROM history_items
                WHERE ${where}
                ORDER BY created_at DESC, id DESC
                LIMIT $${limit} OFFSET $${offset}) AS page
         JOIN history_items h ON h.id = page.id
        ORDER BY page.created_at DESC, page.id DESC`,
      values: [...values, query.limit, (query.page - 1) * query.limit],
    },
    // The trigger-kept counts answer `total` from a few rows, however long the user's history is.
    count: { text: `SELECT coalesce(sum(count), 0)::int AS total FROM history_counts WHERE ${where}`, values },
  };
}
