import type { Redis } from 'ioredis';
import { ServiceUnavailableError } from '../common/unavailable.js';
import type { AppConfig } from '../config/config.js';
import type { HistoryRepository } from '../jobs/history.repository.js';
import type { EngineSlotQueue } from '../jobs/engine-slot-queue.js';
import type { JobLifecycle } from '../jobs/job-lifecycle.js';
import type { JobQueue } from '../queue/job-queue.js';
import type { UserRepository, UserRow } from '../users/user.repository.js';
import type { StoredFiles } from '../files/stored-files.js';
import { UserRemoval } from './user-removal.js';

const USER = { id: 'user-1', name: 'alice' } as UserRow;
const HOLDINGS = { keys: 1, secrets: 0, items: 0, pending: 0 };

/** A user with no items left, the user row kept until `deleteIfNoItems`, and a Redis that `scan` answers or not. */
function removalWith(scan: () => Promise<[string, string[]]>) {
  const rows = new Set([USER.id]);
  const users = {
    revokeKeysOf: () => Promise.resolve(1),
    deleteIfNoItems: (id: string) => Promise.resolve(rows.delete(id)),
  } as unknown as UserRepository;
  const items = { someOf: () => Promise.resolve([]) } as unknown as HistoryRepository;
  const redis = { scan, del: (...keys: string[]) => Promise.resolve(keys.length) } as unknown as Redis;
  const config = { authCacheTtlMs: 0, redisPrefix: 'igs' } as AppConfig;
  const files = { removeSome: () => Promise.resolve(0) } as unknown as StoredFiles;
  const slots = { forget: () => Promise.resolve(0) } as unknown as EngineSlotQueue;
  const sut = new UserRemoval(users, items, {} as JobLifecycle, {} as JobQueue, slots, redis, config, files);
  return { sut, rows };
}

describe('UserRemoval', () => {
  it("removes the user's keys in Redis, then the user", async () => {
    const { sut, rows } = removalWith(() => Promise.resolve(['0', [`igs:rate:create:${USER.id}:1`]]));

    const removed = await sut.remove({ user: USER, holdings: HOLDINGS });

    expect(removed.redisKeys).toBe(2);
    expect(rows.size).toBe(0);
  });

  it('keeps the user when Redis cannot be reached, so that running it again finishes the removal', async () => {
    const { sut, rows } = removalWith(() => Promise.reject(new ServiceUnavailableError('redis')));

    await expect(sut.remove({ user: USER, holdings: HOLDINGS })).rejects.toThrow(ServiceUnavailableError);

    expect(rows.has(USER.id)).toBe(true);
  });
});
