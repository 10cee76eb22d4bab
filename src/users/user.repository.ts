import { Injectable } from '@nestjs/common';
import type { User } from '../auth/user.entity.js';
import { Database } from '../database/database.js';

/** A user's own limits; null where the service's default applies. */
export type UserLimitsRow = Pick<
  User,
  'maxPending' | 'creationsPerMinute' | 'concurrentUploads' | 'eventStreams' | 'heldRequests'
>;

/** Each of a user's own limits and the column it is kept in. */
const LIMIT_COLUMNS: Record<keyof UserLimitsRow, string> = {
  maxPending: 'max_pending',
  creationsPerMinute: 'creations_per_minute',
  concurrentUploads: 'concurrent_uploads',
  eventStreams: 'event_streams',
  heldRequests: 'held_requests',
};

const LIMITS_SELECTED = Object.entries(LIMIT_COLUMNS)
  .map(([field, column]) => `u.${column} AS "${field}"`)
  .join(', ');

/** A user as the operators' command line finds one. */
export type UserRow = Pick<User, 'id' | 'name' | 'createdAt'> & UserLimitsRow;

/** A user with their item counts, as `igs users list` shows them. */
export type UserListingRow = UserRow & { items: number; pending: number };

/** What a user's removal takes with the user row (their items go first, through the job lifecycle). */
export interface UserHoldings {
  keys: number;
  /** Webhook signing secrets: 0 or 1. */
  secrets: number;
  items: number;
  pending: number;
}

const USER_COLUMNS = `u.id, u.name, u.created_at AS "createdAt", ${LIMITS_SELECTED}`;

/**
 * The operators' statements on `users` (listing, limits, removal) and the per-user limits every creation reads. Keys
 * and the user a first key creates: ApiKeyRepository.
 */
@Injectable()
export class UserRepository {
  constructor(private readonly db: Database) {}

  async findByName(name: string): Promise<UserRow | undefined> {
    const [row] = await this.db.query<UserRow>({
      text: `SELECT ${USER_COLUMNS} FROM users u WHERE u.name = $1`,
      values: [name],
    });
    return row;
  }

  /** Every user by name, with their items counted from the trigger-kept counts. */
  async list(): Promise<UserListingRow[]> {
    return this.db.query<UserListingRow>({
      text: `SELECT ${USER_COLUMNS},
                    coalesce(sum(c.count), 0)::int AS items,
                    coalesce(sum(c.count) FILTER (WHERE c.status = 'pending'), 0)::int AS pending
               FROM users u LEFT JOIN history_counts c ON c.user_id = u.id
              GROUP BY u.id ORDER BY u.name`,
      values: [],
    });
  }

  /** The user's own limits: read on job creations, streams and held requests (through a short cache, UserLimits). */
  async limitsOf(userId: string): Promise<UserLimitsRow | undefined> {
    const [row] = await this.db.read<UserLimitsRow>({
      name: 'user-limits',
      text: `SELECT ${LIMITS_SELECTED} FROM users u WHERE u.id = $1`,
      values: [userId],
    });
    return row;
  }

  /** Sets the limits given (an undefined one is left as it is); resolves false when there is no such user. */
  async setLimits(name: string, limits: Partial<UserLimitsRow>): Promise<boolean> {
    const values: unknown[] = [name];
    const assignments = Object.entries(LIMIT_COLUMNS).map(([field, column]) => {
      const value = limits[field as keyof UserLimitsRow];
      values.push(value !== undefined, value ?? null);
      return `${column} = CASE WHEN $${values.length - 1} THEN $${values.length}::int ELSE ${column} END`;
    });
    const updated = await this.db.query({
      text: `UPDATE users SET ${assignments.join(', ')} WHERE name = $1 RETURNING id`,
      values,
    });
    return updated.length > 0;
  }

  async holdingsOf(userId: string): Promise<UserHoldings> {
    const [row] = await this.db.query<UserHoldings>({
      text: `SELECT (SELECT count(*) FROM api_keys WHERE user_id = $1)::int AS keys,
                    (SELECT count(*) FROM webhook_secrets WHERE user_id = $1)::int AS secrets,
                    (SELECT coalesce(sum(count), 0) FROM history_counts WHERE user_id = $1)::int AS items,
                    (SELECT coalesce(sum(count), 0) FROM history_counts
                      WHERE user_id = $1 AND status = 'pending')::int AS pending`,
      values: [userId],
    });
    return row;
  }

  /** Revokes every active key of the user; resolves how many were. */
  async revokeKeysOf(userId: string): Promise<number> {
    const revoked = await this.db.query({
      text: 'UPDATE api_keys SET revoked_at = now() WHERE user_id = $1 AND revoked_at IS NULL RETURNING id',
      values: [userId],
    });
    return revoked.length;
  }

  /**
   * Deletes the user with their keys and webhook secret (the foreign keys cascade) unless they still have items, and
   * resolves whether the user is gone. Under the lock `create_history_item` takes per user, so a creation either
   * committed before (the user still has an item) or fails after (the user is gone).
   */
  async deleteIfNoItems(userId: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      await tx.query({ text: 'SELECT pg_advisory_xact_lock(hashtext($1::text))', values: [userId] });
      const [{ busy }] = await tx.query<{ busy: boolean }>({
        text: 'SELECT EXISTS (SELECT 1 FROM history_items WHERE user_id = $1) AS busy',
        values: [userId],
      });
      if (busy) return false;
      await tx.query({ text: 'DELETE FROM users WHERE id = $1', values: [userId] });
      return true;
    });
  }
}
