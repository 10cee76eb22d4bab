import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { LRUCache } from 'lru-cache';
import { DataSource, IsNull } from 'typeorm';
import { AppConfig } from '../config/config.js';
import type { Principal } from './auth.decorators.js';
import { Database } from '../database/database.js';
import { ApiKey } from './api-key.entity.js';
import { generateApiKey, hashApiKey, hashesEqual, isWellFormedApiKey, lookupPrefix } from '../common/api-key.js';
import { User } from './user.entity.js';

export interface ApiKeyListing {
  prefix: string;
  user: string;
  createdAt: Date;
  revokedAt: Date | null;
}

@Injectable()
export class ApiKeyService {
  /**
   * Authenticated keys by their hash, so polling clients cost no extra query. A revoked key stays valid
   * in a process for at most AUTH_CACHE_TTL_MS.
   */
  private readonly cache: LRUCache<string, Principal>;

  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly db: Database,
    private readonly config: AppConfig,
  ) {
    this.cache = new LRUCache({ max: 10_000, ttl: config.authCacheTtlMs });
  }

  /** Creates the user if new and returns a fresh key; the key is not stored and cannot be shown again. */
  async create(userName: string): Promise<string> {
    return this.dataSource.transaction(async (manager) => {
      await manager
        .createQueryBuilder()
        .insert()
        .into(User)
        .values({ id: randomUUID(), name: userName })
        .orIgnore()
        .execute();
      const user = await manager.findOneByOrFail(User, { name: userName });
      const key = generateApiKey();
      await manager.insert(ApiKey, {
        id: randomUUID(),
        userId: user.id,
        prefix: lookupPrefix(key),
        keyHash: hashApiKey(key),
      });
      return key;
    });
  }

  async list(): Promise<ApiKeyListing[]> {
    const keys = await this.dataSource.getRepository(ApiKey).find({
      relations: { user: true },
      order: { createdAt: 'ASC' },
    });
    return keys.map((key) => ({
      prefix: key.prefix,
      user: key.user.name,
      createdAt: key.createdAt,
      revokedAt: key.revokedAt,
    }));
  }

  /** Revokes by the whole key or by the prefix `list` shows; returns how many keys were revoked. */
  async revoke(keyOrPrefix: string): Promise<number> {
    const result = await this.dataSource
      .getRepository(ApiKey)
      .update({ prefix: lookupPrefix(keyOrPrefix), revokedAt: IsNull() }, { revokedAt: () => 'now()' });
    this.cache.clear();
    return result.affected ?? 0;
  }

  async authenticate(key: string): Promise<Principal | undefined> {
    if (!isWellFormedApiKey(key)) return undefined;
    const hash = hashApiKey(key);
    const cacheKey = hash.toString('base64');
    const cached = this.cache.get(cacheKey);
    if (cached) return cached;

    const [row] = await this.db.read<Pick<ApiKey, 'userId' | 'keyHash'>>({
      name: 'api-key',
      text: 'SELECT user_id AS "userId", key_hash AS "keyHash" FROM api_keys WHERE prefix = $1 AND revoked_at IS NULL',
      values: [lookupPrefix(key)],
    });
    if (!row || !hashesEqual(row.keyHash, hash)) return undefined;
    const principal = { userId: row.userId };
    // A TTL of 0 is "no TTL" to lru-cache, but "no cache" to AUTH_CACHE_TTL_MS.
    if (this.config.authCacheTtlMs > 0) this.cache.set(cacheKey, principal);
    return principal;
  }
}
