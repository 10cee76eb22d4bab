import { Injectable } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import type { Principal } from './auth.decorators.js';
import { generateApiKey, hashApiKey, hashesEqual, isWellFormedApiKey, lookupPrefix } from '../common/api-key.js';
import { ApiKeyRepository } from './api-key.repository.js';

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
  private readonly cache = new Map<string, { principal: Principal; expiresAt: number }>();
  private static readonly CACHE_MAX_ENTRIES = 10_000;

  constructor(
    private readonly keys: ApiKeyRepository,
    private readonly config: AppConfig,
  ) {}

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

  /** Revokes by the whole key or by the prefix `list` shows; returns how many keys were revoked. */
  async revoke(keyOrPrefix: string): Promise<number> {
    const revoked = await this.keys.revoke(lookupPrefix(keyOrPrefix));
    this.cache.clear();
    return revoked;
  }

  async authenticate(key: string): Promise<Principal | undefined> {
    if (!isWellFormedApiKey(key)) return undefined;
    const hash = hashApiKey(key);
    const cacheKey = hash.toString('base64');
    const cached = this.cache.get(cacheKey);
    if (cached && cached.expiresAt > Date.now()) return cached.principal;

    const row = await this.keys.findActive(lookupPrefix(key));
    if (!row || !hashesEqual(row.keyHash, hash)) return undefined;
    const principal = { userId: row.userId, admin: row.admin };
    this.remember(cacheKey, principal);
    return principal;
  }

  private remember(cacheKey: string, principal: Principal): void {
    if (this.config.authCacheTtlMs === 0) return;
    if (this.cache.size >= ApiKeyService.CACHE_MAX_ENTRIES) this.cache.clear();
    this.cache.set(cacheKey, { principal, expiresAt: Date.now() + this.config.authCacheTtlMs });
  }
}
