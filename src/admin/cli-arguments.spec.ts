import { parseCli, UsageError } from './cli-arguments.js';

describe('parseCli', () => {
  it.each([
    [['keys', 'create', '--user', 'ann'], { name: 'keys create', user: 'ann', admin: false }],
    [['keys', 'create', '--user', 'ann', '--admin'], { name: 'keys create', user: 'ann', admin: true }],
    [['keys', 'revoke', 'igs_AbCd1234'], { name: 'keys revoke', keyOrPrefix: 'igs_AbCd1234' }],
    [['users', 'delete', 'ann'], { name: 'users delete', user: 'ann', yes: false }],
    [['users', 'delete', 'ann', '--yes'], { name: 'users delete', user: 'ann', yes: true }],
    [
      ['limits', 'set', '--user', 'ann', '--pending', '3'],
      { name: 'limits set', user: 'ann', maxPending: 3, creationsPerMinute: undefined },
    ],
    [
      ['limits', 'set', '--per-minute', '120', '--user', 'ann'],
      { name: 'limits set', user: 'ann', maxPending: undefined, creationsPerMinute: 120 },
    ],
    [
      ['limits', 'set', '--user', 'ann', '--uploads', '2', '--streams', '5', '--held', '1'],
      { name: 'limits set', user: 'ann', concurrentUploads: 2, eventStreams: 5, heldRequests: 1 },
    ],
    [['limits', 'reset', '--user', 'ann'], { name: 'limits reset', user: 'ann' }],
    [['routing', 'check'], { name: 'routing check', file: undefined }],
    [['routing', 'check', 'new.yaml'], { name: 'routing check', file: 'new.yaml' }],
  ])('reads %j', (args, command) => {
    expect(parseCli(args)).toEqual(command);
  });

  it.each([
    [['create', '--user', 'ann'], { name: 'keys create', user: 'ann', admin: false }],
    [['list'], { name: 'keys list' }],
    [['revoke', 'igs_AbCd1234'], { name: 'keys revoke', keyOrPrefix: 'igs_AbCd1234' }],
  ])('reads the key tool form %j as igs keys', (args, command) => {
    expect(parseCli(args)).toEqual(command);
  });

  it.each([
    [[]],
    [['keys', 'create', '--user', '  ']],
    [['keys', 'create', '--user=ann', 'extra']],
    [['limits', 'set', '--user', 'ann']],
    [['limits', 'set', '--user', 'ann', '--pending', '1.5']],
    [['limits', 'set', '--user', 'ann', '--per-minute', '1000001']],
    [['limits', 'set', '--user', 'ann', '--streams', '0']],
    [['limits', 'set', '--user', 'ann', '--held', 'all']],
    [['limits', 'set', '--user', 'ann', '--uploads']],
    [['users', 'list', '--all']],
    [['routing', 'check', 'a.yaml', 'b.yaml']],
  ])('refuses %j', (args) => {
    expect(() => parseCli(args)).toThrow(UsageError);
  });
});
