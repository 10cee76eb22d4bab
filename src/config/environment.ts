import { applyDecorators } from '@nestjs/common';
import { Expose, plainToInstance, Transform } from 'class-transformer';
import {
  IsBoolean,
  IsDefined,
  IsIn,
  IsInt,
  IsOptional,
  Matches,
  Max,
  Min,
  ValidateBy,
  ValidateIf,
  type ValidationArguments,
  validateSync,
} from 'class-validator';
import { wholeNumberParameter } from '../common/validation.js';
import { parseDuration } from './duration.js';

/** The Standard Webhooks retry schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h after the attempt before. */
const STANDARD_WEBHOOK_RETRY_DELAYS_MS = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000];

const ROLES = ['api', 'worker', 'all', 'migrate'] as const;
const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
const STORAGES = ['local', 's3'] as const;

/** `migrate` applies pending migrations and exits: a one-shot step before the other roles start. */
export type Role = (typeof ROLES)[number];
export type LogLevel = (typeof LOG_LEVELS)[number];

/** A message naming the variable and the value it was given, so one boot names every bad one. */
function got(args: ValidationArguments): string {
  return `got "${Array.isArray(args.value) ? args.value.join(',') : String(args.value)}"`;
}

/** One of `allowed`. */
function OneOf(allowed: readonly string[]): PropertyDecorator {
  return applyDecorators(
    Expose(),
    IsIn(allowed, { message: (args) => `${args.property} must be one of ${allowed.join(', ')}, ${got(args)}` }),
  );
}

/** `true` or `false`. */
function Flag(): PropertyDecorator {
  return applyDecorators(
    Expose(),
    Transform(({ value }: { value: unknown }) => (value === 'true' ? true : value === 'false' ? false : value)),
    IsBoolean({ message: (args) => `${args.property} must be one of true, false, ${got(args)}` }),
  );
}

/**
 * A whole number as written (`1e3`, `0x10` and `3.5` are not) from `min` to `max`; `min` may be another variable's
 * value. Text that is no whole number is left as it came, for the checks to refuse and the message to show.
 */
function WholeNumber(min: number | ((env: EnvironmentVariables) => number), max: number): PropertyDecorator {
  const lowest = (args: ValidationArguments) =>
    typeof min === 'number' ? min : min(args.object as EnvironmentVariables);
  const message = (args: ValidationArguments) =>
    `${args.property} must be a whole number from ${lowest(args)} to ${max}, ${got(args)}`;
  return applyDecorators(
    Expose(),
    Transform(wholeNumberParameter),
    IsInt({ message }),
    typeof min === 'number'
      ? Min(min, { message })
      : ValidateBy(
          { name: 'atLeast', validator: { validate: (value, args) => (value as number) >= lowest(args!) } },
          { message },
        ),
    Max(max, { message }),
  );
}

/** Comma-separated whole numbers, each from `min` to `max`; kept as text unless every part is a number. */
function WholeNumbers(min: number, max: number): PropertyDecorator {
  const message = (args: ValidationArguments) =>
    `${args.property} must be comma-separated whole numbers from ${min} to ${max}, ${got(args)}`;
  return applyDecorators(
    Expose(),
    Transform(({ value }: { value: unknown }) => {
      const numbers = typeof value === 'string' ? value.split(',').map((part) => Number(part.trim())) : [];
      return numbers.every(Number.isSafeInteger) ? numbers : value;
    }),
    IsInt({ each: true, message }),
    Min(min, { each: true, message }),
    Max(max, { each: true, message }),
  );
}

/**
 * A URL with one of these schemes, as WHATWG URL parses it, like the drivers that use it. Not class-validator's
 * IsUrl: its validator.js refuses hosts the drivers take (`localhost` unless told, `db_1` with its underscore).
 */
function UrlOf(...protocols: string[]): PropertyDecorator {
  return applyDecorators(
    Expose(),
    IsOptional(),
    ValidateBy(
      { name: 'urlOf', validator: { validate: (value) => protocols.includes(protocolOf(value)) } },
      // The value may hold a password, so it is never echoed.
      {
        message: (args) =>
          `${args.property} must be a URL starting with ${protocols.map((p) => `${p}//`).join(' or ')}`,
      },
    ),
  );
}

function protocolOf(value: unknown): string {
  try {
    return new URL(String(value)).protocol;
  } catch {
    return '';
  }
}

/**
 * At most a century: the time an item's `expires_at` and the sweep's cut-off are computed at must stay a date, in
 * JavaScript (±273,790 years) and in PostgreSQL (from 4713 BC).
 */
const MAX_DURATION_DAYS = 36_500;

/** `30d`, `12h`, `90s` (see `parseDuration`), from a second to MAX_DURATION_DAYS. */
function Duration(): PropertyDecorator {
  return applyDecorators(
    Expose(),
    IsOptional(),
    ValidateBy(
      {
        name: 'duration',
        validator: {
          validate: (value) => {
            const ms = parseDuration(String(value));
            return ms >= 1000 && ms <= MAX_DURATION_DAYS * 86_400_000;
          },
        },
      },
      {
        message: (args) =>
          `${args.property} must be a duration from a second to ${MAX_DURATION_DAYS}d such as 30d, 12h or 90s, ${got(args)}`,
      },
    ),
  );
}

/** Exact origins as browsers send them in `Origin`: scheme, host and a non-default port; nothing else. */
function Origins(): PropertyDecorator {
  const wrong = (origins: unknown) => (origins as string[]).filter((origin) => !isOrigin(origin));
  return applyDecorators(
    Expose(),
    Transform(({ value }: { value: string }) =>
      value
        .split(',')
        .map((origin) => origin.trim())
        .filter((origin) => origin !== ''),
    ),
    ValidateBy(
      { name: 'origins', validator: { validate: (value) => wrong(value).length === 0 } },
      {
        message: (args) =>
          `${args.property} must be comma-separated origins such as https://app.example.com (lower case, no path, no default port), got ${wrong(
            args.value,
          )
            .map((origin) => `"${origin}"`)
            .join(', ')}`,
      },
    ),
  );
}

function isOrigin(text: string): boolean {
  return ['http:', 'https:'].includes(protocolOf(text)) && new URL(text).origin === text;
}

/** Set exactly when `other` is. */
function SetTogetherWith(other: keyof EnvironmentVariables): PropertyDecorator {
  return ValidateBy(
    {
      name: 'setTogetherWith',
      validator: {
        validate: (value, args) =>
          (value === undefined) === ((args!.object as EnvironmentVariables)[other] === undefined),
      },
    },
    { message: (args) => `${other} and ${args.property} must be set together, or both left unset` },
  );
}

const usesS3 = (env: EnvironmentVariables) => env.STORAGE === 's3';

const MAX_IMAGE_SIDE = 65535;
const DEFAULT_IMAGE_MIN_SIDE = 64;

/** IMAGE_MIN_SIDE as it will be after validation: its default when it is wrong. */
function validImageMinSide(env: EnvironmentVariables): number {
  const side = env.IMAGE_MIN_SIDE;
  return Number.isSafeInteger(side) && side >= 1 && side <= MAX_IMAGE_SIDE ? side : DEFAULT_IMAGE_MIN_SIDE;
}

/**
 * The service's environment variables, with their defaults. Not here: `ENGINE_<TOOL>`, whose names come from the
 * catalog, and the rules across variables and the routing file (`AppConfig` checks those).
 */
export class EnvironmentVariables {
  @OneOf(ROLES) ROLE: Role = 'all';
  @Expose() HOST = '0.0.0.0';
  @WholeNumber(0, 65535) PORT = 3000;
  @OneOf(LOG_LEVELS) LOG_LEVEL: LogLevel = 'info';
  @OneOf(LOG_FORMATS) LOG_FORMAT: (typeof LOG_FORMATS)[number] = 'auto';
  @UrlOf('http:', 'https:') PUBLIC_BASE_URL?: string;
  /** Unset: PUBLIC_BASE_URL, a default class-transformer cannot give since it is another variable's value. */
  @UrlOf('http:', 'https:') MEDIA_PUBLIC_BASE_URL?: string;
  @WholeNumber(0, 65535) METRICS_PORT = 0;
  @UrlOf('postgres:', 'postgresql:') DATABASE_URL?: string;
  @Expose() EMBEDDED_DB_DIR = './data/pglite';
  @WholeNumber(1, 65535) EMBEDDED_DB_PORT = 54329;
  @WholeNumber(1, 1000) DB_POOL_SIZE = 10;
  @WholeNumber(1, 64) DB_PIPELINE_CONNECTIONS = 2;
  @UrlOf('redis:', 'rediss:') REDIS_URL = 'redis://127.0.0.1:6379';
  /**
   * The service writes `<REDIS_PREFIX>:<key>`: a prefix ending in ':' would double the colon in every key. `igs users
   * delete` finds a user's keys by a pattern that starts with the prefix, where a glob character would match the keys
   * of another deployment.
   */
  @Expose()
  @Matches(/[^:]$/, {
    message: (args) =>
      `${args.property} must not end with ":" (the service adds it: igs gives igs:bull:...), ${got(args)}`,
  })
  @Matches(/^[^*?[\]\\]*$/, {
    message: (args) => `${args.property} must not hold * ? [ ] or \\ (Redis key patterns start with it), ${got(args)}`,
  })
  REDIS_PREFIX = 'igs';
  @Expose() MEDIA_ROOT = './data/media';
  @Expose() INPUT_ROOT = './data/inputs';
  @OneOf(STORAGES) STORAGE: (typeof STORAGES)[number] = 'local';
  @ValidateIf(usesS3) @UrlOf('http:', 'https:') S3_ENDPOINT?: string;
  @Expose() S3_REGION = 'us-east-1';
  @Expose() @ValidateIf(usesS3) @IsDefined({ message: 'S3_BUCKET must be set when STORAGE=s3' }) S3_BUCKET?: string;
  @Expose() S3_ACCESS_KEY_ID?: string;
  @Expose() @ValidateIf(usesS3) @SetTogetherWith('S3_ACCESS_KEY_ID') S3_SECRET_ACCESS_KEY?: string;
  @ValidateIf(usesS3) @Flag() S3_FORCE_PATH_STYLE = false;
  @Expose() UPLOAD_TMP_DIR = './data/tmp';
  @WholeNumber(1024, 1024 ** 3) UPLOAD_MAX_FILE_BYTES = 10 * 1024 * 1024;
  @WholeNumber(1, 100) UPLOAD_MAX_PARTS = 10;
  @WholeNumber(1, MAX_IMAGE_SIDE) IMAGE_MIN_SIDE = DEFAULT_IMAGE_MIN_SIDE;
  /** Unset: 8192, whatever IMAGE_MIN_SIDE is; a default of the class would be checked against it. */
  @IsOptional() @WholeNumber(validImageMinSide, MAX_IMAGE_SIDE) IMAGE_MAX_SIDE?: number;
  @WholeNumber(1, 1_000_000_000) IMAGE_MAX_PIXELS = 40_000_000;
  @WholeNumber(1, 1_000_000) LIMIT_MAX_PENDING = 10;
  @WholeNumber(1, 1_000_000) LIMIT_CREATIONS_PER_MINUTE = 60;
  @WholeNumber(1, 1_000_000) LIMIT_CONCURRENT_UPLOADS = 4;
  @WholeNumber(1, 1_000_000) LIMIT_EVENT_STREAMS = 20;
  @WholeNumber(1, 1_000_000) LIMIT_HELD_REQUESTS = 20;
  @WholeNumber(1, 256) WORKER_CONCURRENCY = 2;
  @WholeNumber(1, 20) JOB_ATTEMPTS = 3;
  @WholeNumber(0, 3_600_000) JOB_BACKOFF_MS = 1000;
  @WholeNumber(1000, 7 * 24 * 3_600_000) JOB_DEADLINE_MS = 15 * 60_000;
  @WholeNumber(500, 3_600_000) JOB_LOCK_MS = 30_000;
  @WholeNumber(100, 3_600_000) JOB_STALLED_CHECK_MS = 15_000;
  @WholeNumber(100, 3_600_000) ENGINE_TIMEOUT_MS = 120_000;
  @WholeNumber(100, 3_600_000) RECONCILE_INTERVAL_MS = 30_000;
  @WholeNumber(100, 3_600_000) EVENT_STREAM_HEARTBEAT_MS = 15_000;
  @Flag() WEBHOOK_ALLOW_HTTP = false;
  @Flag() WEBHOOK_ALLOW_PRIVATE_NETWORKS = false;
  @WholeNumbers(0, 7 * 86_400_000) WEBHOOK_RETRY_DELAYS_MS: readonly number[] = STANDARD_WEBHOOK_RETRY_DELAYS_MS;
  @WholeNumber(100, 600_000) WEBHOOK_TIMEOUT_MS = 10_000;
  @WholeNumber(0, 3_600_000) SHUTDOWN_TIMEOUT_MS = 30_000;
  /** Unset: final items are kept until their user deletes them. */
  @Duration() HISTORY_RETENTION?: string;
  /** At most a minute, as the operators' guide promises. */
  @WholeNumber(100, 60_000) RETENTION_SWEEP_INTERVAL_MS = 60_000;
  @WholeNumber(0, 3_600_000) AUTH_CACHE_TTL_MS = 10_000;
  @WholeNumber(1, 1_000_000) AUTH_FAILURES_PER_MINUTE = 30;
  @WholeNumber(0, 10) TRUST_PROXY = 0;
  @Origins() CORS_ORIGINS: readonly string[] = [];
  @WholeNumber(1000, 3_600_000) HTTP_IDLE_TIMEOUT_MS = 60_000;
  @Expose() ENGINES_FILE?: string;
}

/**
 * The environment's variables, validated: blank values count as unset, and each wrong variable makes one problem
 * and takes its default, so the checks across variables that follow judge the others against a sane value.
 */
export function readEnvironment(env: NodeJS.ProcessEnv): { variables: EnvironmentVariables; problems: string[] } {
  // Only the declared variables are taken; an unset one keeps its default, untransformed.
  const variables = plainToInstance(EnvironmentVariables, givenIn(env), {
    excludeExtraneousValues: true,
    exposeDefaultValues: true,
  });
  const defaults = new EnvironmentVariables();
  const problems: string[] = [];
  for (const error of validateSync(variables)) {
    const [message] = Object.values(error.constraints ?? {});
    if (message) problems.push(message);
    Object.assign(variables, { [error.property]: defaults[error.property as keyof EnvironmentVariables] });
  }
  return { variables, problems };
}

/** The variables set to something, trimmed. */
export function givenIn(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env).flatMap(([name, value]) => {
      const trimmed = value?.trim();
      return trimmed ? [[name, trimmed]] : [];
    }),
  );
}
