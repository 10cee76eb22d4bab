import { createHash, randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { Redis } from 'ioredis';
import { DomainError } from '../common/problem.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { REDIS } from '../redis/redis.module.js';
import { MediaUrls } from '../media/media-urls.js';
import { JobAcceptedDto, type ResultUrls } from './generation.dto.js';

const RETENTION_SECONDS = 24 * 3600;
/** A claim whose request died before its job was accepted may be taken over by a retry after this. */
const CLAIM_MS = 120_000;

/** Replaces the entry with ARGV[2] only if it is still ARGV[1]: of two retries taking over a claim, one does. */
const TAKE_OVER_SCRIPT = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
  return 1
end
return 0`;

export interface StoredResponse {
  status: number;
  headers: Record<string, string>;
  body: unknown;
}

/** `id`: the item id the claim reserves; every request handling the key creates its job under that id, or none. */
type Entry =
  | { state: 'processing'; fingerprint: string; id: string; claimedAt: number }
  | { state: 'done'; fingerprint: string; response: StoredResponse };

/** What a request with an `Idempotency-Key` may do next: create its job under `id`, or answer as the first did. */
export type Claim = { kind: 'claimed'; key: string; id: string } | { kind: 'replay'; response: StoredResponse };

/**
 * Stripe-style idempotency keys, per user, kept 24 h in Redis: the first request claims the key, a
 * repeat gets the first answer, a different payload under the same key is refused.
 *
 * A claim reserves the id of the item its request creates, so a key makes one job at most: once that item exists the
 * key is never freed, and a repeat is answered with that job even when the first answer could not be stored (Redis
 * failed the write, or the process died first).
 */
@Injectable()
export class IdempotencyKeys {
  constructor(
    @Inject(REDIS) private readonly redis: Redis,
    private readonly items: HistoryRepository,
    private readonly mediaUrls: MediaUrls,
  ) {
    redis.defineCommand('takeOverIdempotencyClaim', { numberOfKeys: 1, lua: TAKE_OVER_SCRIPT });
  }

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
    const entry: Entry = { state: 'processing', fingerprint, id: randomUUID(), claimedAt: Date.now() };
    // Kept as long as the answer would be: the reserved id must outlive a request that could not store its answer.
    const claimed = await this.redis.set(key, JSON.stringify(entry), 'EX', RETENTION_SECONDS, 'NX');
    if (claimed) return { kind: 'claimed', key, id: entry.id };

    const existing = await this.redis.get(key);
    if (!existing) return this.claim(userId, idempotencyKey, fingerprint);
    const found = JSON.parse(existing) as Entry;
    if (found.fingerprint !== fingerprint) {
      throw new DomainError(
        'idempotency_key_reused',
        'This Idempotency-Key was used for a different request; use a new key for a new request.',
      );
    }
    if (found.state === 'done') return { kind: 'replay', response: found.response };
    // Accepted, its answer not stored (yet, or ever): the same job.
    if (await this.items.findOwned(userId, found.id))
      return { kind: 'replay', response: acceptedAnswer(found.id, this.mediaUrls.forItem(found.id, Date.now())) };
    // Its request died before the job was accepted: a retry takes over, with the same reserved id.
    if (Date.now() - found.claimedAt >= CLAIM_MS) {
      const takenOver: Entry = { ...found, claimedAt: Date.now() };
      const redis = this.redis as Redis & {
        takeOverIdempotencyClaim(key: string, expected: string, replacement: string): Promise<number>;
      };
      if (await redis.takeOverIdempotencyClaim(key, existing, JSON.stringify(takenOver))) {
        return { kind: 'claimed', key, id: found.id };
      }
    }
    throw new DomainError('idempotency_in_progress', 'A request with this Idempotency-Key is still being handled.', {
      headers: { 'Retry-After': '1' },
    });
  }

  async complete(claimKey: string, fingerprint: string, response: StoredResponse): Promise<void> {
    const entry: Entry = { state: 'done', fingerprint, response };
    await this.redis.set(claimKey, JSON.stringify(entry), 'EX', RETENTION_SECONDS);
  }

  /**
   * Frees the key after a failed request that made no job, so the client's retry is handled afresh. A request that
   * failed after its item was written (a queue outage whose clean-up failed too: the reconciler queues the item) keeps
   * it: the retry is answered with that job.
   */
  async release(userId: string, claim: Extract<Claim, { kind: 'claimed' }>): Promise<void> {
    if (await this.items.findOwned(userId, claim.id)) return;
    await this.redis.del(claim.key);
  }
}

/** The answer to a job's creation, once it is accepted and queued. */
export function acceptedAnswer(id: string, urls: ResultUrls): StoredResponse {
  return { status: 202, headers: { Location: `/user/generation-history/${id}` }, body: JobAcceptedDto.of(id, urls) };
}

/** What the names of a user's idempotency keys start with (a user's removal deletes them). */
export function idempotencyKeysOf(userId: string): string {
  return `idem:${userId}:`;
}
