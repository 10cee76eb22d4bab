import { Injectable } from '@nestjs/common';
import { LRUCache } from 'lru-cache';
import { AppConfig } from '../config/config.js';
import type { Principal } from './auth.decorators.js';
import { generateApiKey, hashApiKey, hashesEqual, isWellFormedApiKey, lookupPrefix } from '../common/api-key.js';
import { ApiKeyRepository } from './api-key.repository.js';

/** The key of an `Authorization: Bearer <api_key>` header, if that is what the header is. */
export function bearerKey(authorization: string | undefined): string | undefined {
  return /^Bearer +(\S+) *$/i.exec(authorization ?? '')?.[1];
}

export interface ApiKeyListing {
  prefix: string;
  user: string;
  createdAt: Date;
  revokedAt: Date | null;
  admin: boolean;
}

@Injectable()
export class ApiKeyService {
  /**
   * Authenticated keys by their hash, so polling clients cost no extra query. A revoked key stays valid
   * in a process for at most AUTH_CACHE_TTL_MS.
   */
  private readonly cache: LRUCache<string, Principal>;

  constructor(
    private readonly keys: ApiKeyRepository,
    private readonly config: AppConfig,
  ) {
    this.cache = new LRUCache({ max: 10_000, ttl: config.authCacheTtlMs });
  }

  /**
   * Creates the user if new and returns a fresh key, an admin key (it opens the admin pages too) when `admin`; the
   * key is not stored and cannot be shown again.
   */
  async create(userName: string, { admin = false } = {}): Promise<string> {
    const key = generateApiKey();
    await this.keys.createForUser(userName, { prefix: lookupPrefix(key), keyHash: hashApiKey(key), admin });
    return key;
  }

  async list(): Promise<ApiKeyListing[]> {
    const keys = await this.keys.list();
    return keys.map((key) => ({
      prefix: key.prefix,
      user: key.name,
      createdAt: key.createdAt,
      revokedAt: key.revokedAt,
      admin: key.admin,
    }));
  }

  /**
   * Revokes by the whole key (only the key whose hash it has: a mistyped key revokes none, not the key sharing its
   * prefix) or by the prefix `list` shows; returns how many keys were revoked.
   */
  async revoke(keyOrPrefix: string): Promise<number> {
    const revoked = isWellFormedApiKey(keyOrPrefix)
      ? await this.keys.revoke(lookupPrefix(keyOrPrefix), hashApiKey(keyOrPrefix))
      : await this.keys.revoke(keyOrPrefix);
    this.cache.clear();
    return revoked;
  }

  async authenticate(key: string): Promise<Principal | undefined> {
    if (!isWellFormedApiKey(key)) return undefined;
    const hash = hashApiKey(key);
    const cacheKey = hash.toString('base64');
    const cached = this.cache.get(cacheKey);
    if (cached) return cached;

    const row = await this.keys.findActive(lookupPrefix(key));
    if (!row || !hashesEqual(row.keyHash, hash)) return undefined;
    const principal = { userId: row.userId, admin: row.admin };
    // A TTL of 0 is "no TTL" to lru-cache, but "no cache" to AUTH_CACHE_TTL_MS.
    if (this.config.authCacheTtlMs > 0) this.cache.set(cacheKey, principal);
    return principal;
  }
}
