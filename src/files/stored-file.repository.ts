import { Injectable } from '@nestjs/common';
import { Database } from '../database/database.js';
import type { StoredFile } from './stored-file.entity.js';

export type StoredFileRow = Pick<
  StoredFile,
  'id' | 'userId' | 'key' | 'format' | 'width' | 'height' | 'bytes' | 'createdAt' | 'expiresAt'
>;

const COLUMNS = `id, user_id AS "userId", key, format, width, height, bytes, created_at AS "createdAt",
       expires_at AS "expiresAt"`;

/** Every statement on `files`. A file past its `expires_at` is gone for its owner at once; the sweep removes it. */
@Injectable()
export class StoredFileRepository {
  constructor(private readonly db: Database) {}

  /** Records a stored file, kept `ttlMs` from now (the database's now, as every read judges it by). */
  async insert(file: Omit<StoredFileRow, 'createdAt' | 'expiresAt'>, ttlMs: number): Promise<StoredFileRow> {
    const [row] = await this.db.query<StoredFileRow>({
      text: `INSERT INTO files (id, user_id, key, format, width, height, bytes, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => $8::double precision / 1000))
             RETURNING ${COLUMNS}`,
      values: [file.id, file.userId, file.key, file.format, file.width, file.height, file.bytes, ttlMs],
    });
    return row;
  }

  /** The user's file while it lasts; another user's, a missing or an expired one is undefined alike. */
  async findOwn(userId: string, id: string): Promise<StoredFileRow | undefined> {
    const [row] = await this.db.read<StoredFileRow>({
      name: 'file-find-own',
      text: `SELECT ${COLUMNS} FROM files WHERE id = $1 AND user_id = $2 AND expires_at > now()`,
      values: [id, userId],
    });
    return row;
  }

  /** Removes the user's file while it lasts; resolves its key, or undefined when there was none to remove. */
  async deleteOwn(userId: string, id: string): Promise<string | undefined> {
    const [row] = await this.db.query<{ key: string }>({
      text: `DELETE FROM files WHERE id = $1 AND user_id = $2 AND expires_at > now() RETURNING key`,
      values: [id, userId],
    });
    return row?.key;
  }

  /**
   * Removes up to `limit` rows of files past their time (or, with `userId`, of that user's files) and resolves their
   * keys. Rows another sweep holds are skipped: each row goes to one caller.
   */
  async deleteSome(limit: number, userId?: string): Promise<string[]> {
    const rows = await this.db.query<{ key: string }>({
      text: `DELETE FROM files WHERE id IN (
               SELECT id FROM files WHERE ${userId === undefined ? 'expires_at <= now()' : 'user_id = $2'}
               LIMIT $1 FOR UPDATE SKIP LOCKED
             ) RETURNING key`,
      values: userId === undefined ? [limit] : [limit, userId],
    });
    return rows.map((row) => row.key);
  }

  /** Which of these keys a row still names. */
  async keysAmong(keys: readonly string[]): Promise<Set<string>> {
    const rows = await this.db.query<{ key: string }>({
      text: `SELECT key FROM files WHERE key = ANY($1::text[])`,
      values: [keys],
    });
    return new Set(rows.map((row) => row.key));
  }

  async countOf(userId: string): Promise<number> {
    const [row] = await this.db.query<{ count: number }>({
      text: `SELECT count(*)::int AS count FROM files WHERE user_id = $1`,
      values: [userId],
    });
    return row.count;
  }
}
