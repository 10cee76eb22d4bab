import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { Database } from '../database/database.js';
import type { ApiKey } from './api-key.entity.js';
import type { User } from './user.entity.js';

/** What is stored of a new key: never the key itself. */
export type NewApiKey = Pick<ApiKey, 'prefix' | 'keyHash' | 'admin'>;

/** What authenticating a key needs of its row. */
export type ActiveKeyRow = Pick<ApiKey, 'userId' | 'keyHash' | 'admin'>;

/** A key as the key tool lists it, with its user's name. */
export type ApiKeyListingRow = Pick<ApiKey, 'prefix' | 'createdAt' | 'revokedAt' | 'admin'> & Pick<User, 'name'>;

/** Every statement on `api_keys`, and the `users` row a first key creates (the operators' others: UserRepository). */
@Injectable()
export class ApiKeyRepository {
  constructor(private readonly db: Database) {}

  /** Stores the key for the user named `userName`, creating the user if new. */
  async createForUser(userName: string, key: NewApiKey): Promise<void> {
    await this.db.transaction(async (tx) => {
      await tx.query({
        text: 'INSERT INTO users (id, name) VALUES ($1, $2) ON CONFLICT DO NOTHING',
        values: [randomUUID(), userName],
      });
      // A statement of its own: it sees the user a concurrent creation committed while the insert above waited.
      const [user] = await tx.query<Pick<User, 'id'>>({
        text: 'SELECT id FROM users WHERE name = $1',
        values: [userName],
      });
      await tx.query({
        text: 'INSERT INTO api_keys (id, user_id, prefix, key_hash, admin) VALUES ($1, $2, $3, $4, $5)',
        values: [randomUUID(), user.id, key.prefix, key.keyHash, key.admin],
      });
    });
  }

  /** Every key, oldest first. */
  async list(): Promise<ApiKeyListingRow[]> {
    return this.db.query<ApiKeyListingRow>({
      text: `SELECT k.prefix, u.name, k.created_at AS "createdAt", k.revoked_at AS "revokedAt", k.admin
               FROM api_keys k JOIN users u ON u.id = k.user_id
              ORDER BY k.created_at`,
      values: [],
    });
  }

  /**
   * Revokes the active key with this prefix, and when `keyHash` is given only if the key's hash is that one; resolves
   * how many keys were revoked.
   */
  async revoke(prefix: string, keyHash?: Buffer): Promise<number> {
    const revoked = await this.db.query({
      text: `UPDATE api_keys SET revoked_at = now()
              WHERE prefix = $1 AND ($2::bytea IS NULL OR key_hash = $2) AND revoked_at IS NULL RETURNING id`,
      values: [prefix, keyHash ?? null],
    });
    return revoked.length;
  }

  /** The active key with this prefix: the statement behind every authenticated request the cache misses. */
  async findActive(prefix: string): Promise<ActiveKeyRow | undefined> {
    const [row] = await this.db.read<ActiveKeyRow>({
      name: 'api-key',
      text: `SELECT user_id AS "userId", key_hash AS "keyHash", admin
               FROM api_keys WHERE prefix = $1 AND revoked_at IS NULL`,
      values: [prefix],
    });
    return row;
  }
}
