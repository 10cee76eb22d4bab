import { createHash } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { DomainError } from '../common/problem.js';
import { REDIS } from '../redis/redis.module.js';

const RETENTION_SECONDS = 24 * 3600;
/** A claim whose request died without releasing it frees itself after this. */
const CLAIM_SECONDS = 120;

export interface StoredResponse {
  status: number;
  headers: Record<string, string>;
  body: unknown;
}

type Entry =
  { state: 'processing'; fingerprint: string } | { state: 'done'; fingerprint: string; response: StoredResponse };

/** What a request with an `Idempotency-Key` may do next. */
export type Claim = { kind: 'claimed'; key: string } | { kind: 'replay'; response: StoredResponse };

/**
 * Stripe-style idempotency keys, per user, kept 24 h in Redis: the first request claims the key, a
 * repeat gets the first answer, a different payload under the same key is refused.
 */
@Injectable()
export class IdempotencyKeys {
  constructor(@Inject(REDIS) private readonly redis: Redis) {}

  /** `values`: every `Idempotency-Key` header of the request (`headersDistinct`: Node joins repeated ones with ", "). */
  static validate(values: string[] | undefined): string | undefined {
    if (values === undefined) return undefined;
    const [key] = values;
    if (values.length > 1 || key.length < 1 || key.length > 255) {
      throw new DomainError('validation_failed', 'Idempotency-Key must be a single value of 1 to 255 characters.', {
        errors: [{ field: 'Idempotency-Key', message: '1 to 255 characters' }],
      });
    }
    return key;
  }

  async claim(userId: string, idempotencyKey: string, fingerprint: string): Promise<Claim> {
    const key = `${idempotencyKeysOf(userId)}${createHash('sha256').update(idempotencyKey).digest('hex')}`;
    const entry: Entry = { state: 'processing', fingerprint };
    const claimed = await this.redis.set(key, JSON.stringify(entry), 'EX', CLAIM_SECONDS, 'NX');
    if (claimed) return { kind: 'claimed', key };

    const existing = await this.redis.get(key);
    if (!existing) return this.claim(userId, idempotencyKey, fingerprint);
    const found = JSON.parse(existing) as Entry;
    if (found.fingerprint !== fingerprint) {
      throw new DomainError(
        'idempotency_key_reused',
        'This Idempotency-Key was used for a different request; use a new key for a new request.',
      );
    }
    if (found.state === 'processing') {
      throw new DomainError('idempotency_in_progress', 'A request with this Idempotency-Key is still being handled.', {
        headers: { 'Retry-After': '1' },
      });
    }
    return { kind: 'replay', response: found.response };
  }

  async complete(claimKey: string, fingerprint: string, response: StoredResponse): Promise<void> {
    const entry: Entry = { state: 'done', fingerprint, response };
    await this.redis.set(claimKey, JSON.stringify(entry), 'EX', RETENTION_SECONDS);
  }

  /** Frees the key after a failed request, so the client's retry is handled afresh. */
  async release(claimKey: string): Promise<void> {
    await this.redis.del(claimKey);
  }
}

/** What the names of a user's idempotency keys start with (a user's removal deletes them). */
export function idempotencyKeysOf(userId: string): string {
  return `idem:${userId}:`;
}
