import { parseArgs } from 'node:util';

/** What `igs` was asked to do, its arguments checked. */
export type CliCommand =
  | { name: 'keys create'; user: string; admin: boolean }
  | { name: 'keys list' }
  | { name: 'keys revoke'; keyOrPrefix: string }
  | { name: 'users list' }
  | { name: 'users delete'; user: string; yes: boolean }
  | {
      name: 'limits set';
      user: string;
      maxPending?: number;
      creationsPerMinute?: number;
      concurrentUploads?: number;
      eventStreams?: number;
      heldRequests?: number;
    }
  | { name: 'limits reset'; user: string }
  | { name: 'routing check'; file: string | undefined };

export const USAGE = `Usage: igs <command>   (in the image: node dist/cli.js <command>)

  igs keys create --user <name> [--admin]    create a key (and the user if new); prints only the key.
                                             An admin key also opens the admin pages (/admin/queues).
  igs keys list                              list keys: prefix, user, created, active or revoked, admin
  igs keys revoke <prefix|key>               revoke a key
  igs users list                             list users: name, created, items, pending, limits
  igs users delete <name> [--yes]            remove the user, their keys, webhook secret, history items and
                                             files (pending jobs are canceled first); without --yes, print
                                             what would go and change nothing
  igs limits set --user <name> [--pending <n>] [--per-minute <n>]
                 [--uploads <n>] [--streams <n>] [--held <n>]
                                             the user's own limits over LIMIT_MAX_PENDING,
                                             LIMIT_CREATIONS_PER_MINUTE and, at once, LIMIT_CONCURRENT_UPLOADS,
                                             LIMIT_EVENT_STREAMS and LIMIT_HELD_REQUESTS; in effect
                                             everywhere within 10 s
  igs limits reset --user <name>             back to the defaults
  igs routing check [<file>]                 check a routing file (ENGINES_FILE unless given) as the service
                                             checks it at boot and on a change; prints its tools and routes,
                                             or every problem with its key path (exit 1). Nothing is changed.

It reads the service's settings (DATABASE_URL, REDIS_URL, STORAGE...) from the environment, as the service does.
\`npm run apikey -- create|list|revoke\` are \`igs keys create|list|revoke\`.
`;

/** The options of `igs limits set`, and the limit each sets. */
const LIMIT_FLAGS = {
  pending: 'maxPending',
  'per-minute': 'creationsPerMinute',
  uploads: 'concurrentUploads',
  streams: 'eventStreams',
  held: 'heldRequests',
} as const;

/** Arguments that do not make a command: the caller prints the usage and exits 2. */
export class UsageError extends Error {}

/** The largest limit `igs limits set` takes, as the LIMIT_* settings do. */
const MAX_LIMIT = 1_000_000;

/**
 * Reads `igs`'s arguments (and the older `create|list|revoke` forms of `npm run apikey`); throws UsageError for
 * anything else, before anything is done.
 */
export function parseCli(args: readonly string[]): CliCommand {
  const [first, ...rest] = args;
  if (first === 'create' || first === 'list' || first === 'revoke') return parseCli(['keys', ...args]);
  const [second, ...options] = rest;
  switch (`${first} ${second}`) {
    case 'keys create': {
      const { values } = parse(options, { user: 'string', admin: 'boolean' }, 0);
      return { name: 'keys create', user: required(values.user, '--user'), admin: values.admin === true };
    }
    case 'keys list':
      parse(options, {}, 0);
      return { name: 'keys list' };
    case 'keys revoke':
      return { name: 'keys revoke', keyOrPrefix: parse(options, {}, 1).positionals[0] };
    case 'users list':
      parse(options, {}, 0);
      return { name: 'users list' };
    case 'users delete': {
      const { values, positionals } = parse(options, { yes: 'boolean' }, 1);
      return { name: 'users delete', user: required(positionals[0], '<name>'), yes: values.yes === true };
    }
    case 'limits set': {
      const flags = Object.fromEntries(Object.keys(LIMIT_FLAGS).map((flag) => [flag, 'string' as const]));
      const { values } = parse(options, { user: 'string', ...flags }, 0);
      const user = required(values.user, '--user');
      const given = Object.entries(LIMIT_FLAGS).filter(([flag]) => values[flag] !== undefined);
      if (given.length === 0) {
        throw new UsageError(
          `limits set needs at least one of ${Object.keys(LIMIT_FLAGS)
            .map((flag) => `--${flag}`)
            .join(', ')}`,
        );
      }
      return {
        name: 'limits set',
        user,
        ...Object.fromEntries(given.map(([flag, field]) => [field, limit(values[flag], `--${flag}`)])),
      };
    }
    case 'limits reset': {
      const { values } = parse(options, { user: 'string' }, 0);
      return { name: 'limits reset', user: required(values.user, '--user') };
    }
    case 'routing check': {
      const { positionals } = parse(options, {}, options.length === 0 ? 0 : 1);
      return { name: 'routing check', file: positionals[0] };
    }
    default:
      throw new UsageError(first === undefined ? 'no command' : `unknown command: ${args.slice(0, 2).join(' ')}`);
  }
}

function parse(
  args: string[],
  options: Record<string, 'string' | 'boolean'>,
  positionals: number,
): { values: Record<string, string | boolean | undefined>; positionals: string[] } {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      options: Object.fromEntries(Object.entries(options).map(([name, type]) => [name, { type }])),
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (parsed.positionals.length !== positionals) {
    throw new UsageError(`expected ${positionals} argument(s), got ${parsed.positionals.length}`);
  }
  return parsed;
}

function required(value: string | boolean | undefined, name: string): string {
  const text = typeof value === 'string' ? value.trim() : '';
  if (text === '') throw new UsageError(`${name} is required`);
  return text;
}

function limit(value: string | boolean | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const parsed = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(parsed) || parsed < 1 || parsed > MAX_LIMIT) {
    throw new UsageError(`${name} must be a whole number from 1 to ${MAX_LIMIT}`);
  }
  return parsed;
}
