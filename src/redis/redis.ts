import { Redis, type RedisOptions, ReplyError } from 'ioredis';
import { ServiceUnavailableError } from '../common/unavailable.js';

/**
 * Options for connections that answer requests: a command fails at once while Redis is down (no offline
 * queue), so the API answers 503 within its deadline instead of hanging.
 */
export const FAIL_FAST_OPTIONS: RedisOptions = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  connectTimeout: 2000,
  commandTimeout: 2000,
  retryStrategy: (attempt) => Math.min(attempt * 200, 2000),
};

function describeRedisUrl(url: string): string {
  const parsed = new URL(url);
  return `${parsed.protocol}//${parsed.host}`;
}

/** Checks Redis once at boot, so a missing Redis is named plainly instead of failing later. */
export async function assertRedisReachable(url: string): Promise<void> {
  const probe = new Redis(url, {
    lazyConnect: true,
    connectTimeout: 2000,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  probe.on('error', () => {});
  try {
    await probe.connect();
    await probe.ping();
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(
      `Cannot reach Redis at ${describeRedisUrl(url)} (${reason}). The job queue needs a Redis server: ` +
        'start one locally with `redis-server` (Debian/Ubuntu: `apt-get install redis-server`), ' +
        'or `docker run -p 6379:6379 redis:7`, or point REDIS_URL at yours.',
      { cause: error },
    );
  } finally {
    probe.disconnect();
  }
}

/**
 * A connection whose failures reach callers as `ServiceUnavailableError`: a connection refused, dropped or too slow,
 * and commands refused while it is down. Redis's own error replies (a script's error, a wrong type) are the caller's
 * and pass as they are.
 */
export class ServiceRedis extends Redis {
  override sendCommand(...args: Parameters<Redis['sendCommand']>): Promise<unknown> {
    const translated = (super.sendCommand(...args) as Promise<unknown>).catch((error: unknown) => {
      throw error instanceof ReplyError ? error : new ServiceUnavailableError('redis', { cause: error });
    });
    // A pipeline sends its commands here without taking the reply (it reads them from the commands themselves).
    translated.catch(() => {});
    return translated;
  }
}
