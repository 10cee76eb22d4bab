import { once } from 'node:events';
import { ReplyError } from 'ioredis';
import { ServiceUnavailableError } from '../../src/common/unavailable.js';
import { FAIL_FAST_OPTIONS, ServiceRedis } from '../../src/redis/redis.js';
import { freePort } from '../support/service.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';

/** The service's Redis connection tells an outage (503 for the client) from Redis refusing a command (a bug). */
describe('ServiceRedis', () => {
  let env: TestEnvironment;
  const connections: ServiceRedis[] = [];

  beforeAll(async () => {
    env = await createTestEnvironment();
  }, 30_000);

  afterAll(async () => {
    for (const connection of connections) connection.disconnect();
    await env.dispose();
  }, 30_000);

  function connect(url: string): ServiceRedis {
    const connection = new ServiceRedis(url, { ...FAIL_FAST_OPTIONS, keyPrefix: `${env.redisPrefix}:` });
    connection.on('error', () => {});
    connections.push(connection);
    return connection;
  }

  it('answers commands, and passes Redis error replies on as they are', async () => {
    const sut = connect(env.redisUrl);
    await once(sut, 'ready');

    await sut.set('greeting', 'hello');
    expect(await sut.get('greeting')).toBe('hello');
    const refused = await sut.incr('greeting').catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ReplyError);
  });

  it('fails commands with ServiceUnavailableError while Redis cannot be reached', async () => {
    const sut = connect(`redis://127.0.0.1:${await freePort()}`);

    const failure = await sut.get('anything').catch((error: unknown) => error);

    expect(failure).toBeInstanceOf(ServiceUnavailableError);
    expect((failure as ServiceUnavailableError).service).toBe('redis');
  });

  it('leaves no unhandled rejection behind for a pipeline whose connection is down', async () => {
    const sut = connect(`redis://127.0.0.1:${await freePort()}`);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const result = await sut
        .multi()
        .incr('a')
        .exec()
        .catch((error: unknown) => error);
      await new Promise((resolve) => setTimeout(resolve, 50));

      expect(result).toBeInstanceOf(Error);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
