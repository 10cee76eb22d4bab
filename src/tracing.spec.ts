import { redisStatement } from './tracing.js';

describe('redisStatement', () => {
  it("names a script by its sha and its keys, not the job's data it is given", () => {
    const data = JSON.stringify({ historyItemId: 'abc' });
    const args = ['27ea40f2', '2', 'igs:bull:generation:wait', 'igs:bull:generation:id', 'abc', data, '0'];
    expect(redisStatement('evalsha', args)).toBe(
      'evalsha 27ea40f2 2 igs:bull:generation:wait igs:bull:generation:id [3 other arguments]',
    );
  });

  it("leaves an EVAL's script source out, as its arguments", () => {
    const source = "return redis.call('INCR', KEYS[1])";
    expect(redisStatement('EVAL', [source, '1', 'igs:rate:create:u:1', '60'])).toBe(
      'EVAL 1 igs:rate:create:u:1 [1 other arguments]',
    );
  });

  it("keeps OpenTelemetry's default for other commands: a key, never a value", () => {
    expect(redisStatement('set', ['igs:progress:abc', '0.5', 'PX', '60000'])).toBe(
      'set igs:progress:abc [3 other arguments]',
    );
    expect(redisStatement('get', ['igs:progress:abc'])).toBe('get igs:progress:abc');
  });
});
