import { resolve } from 'node:path';
import { CATALOG } from '../catalog/catalog.js';
import { parseDuration } from './duration.js';
import type { CogRoute, CogServerSetting, EngineRouting } from './engine-settings.js';
import { readEnginesFile } from './engines-file.js';

/** The Standard Webhooks retry schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h after the attempt before. */
const STANDARD_WEBHOOK_RETRY_DELAYS_MS = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000];

/** `migrate` applies pending migrations and exits: a one-shot step before the other roles start. */
export type Role = 'api' | 'worker' | 'all' | 'migrate';
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';

/** `ENGINE_<TOOL>`: `local` runs the built-in pipeline; `cog:<url>` sends the job to a Cog server. */
type EngineShortcut = { kind: 'local' } | { kind: 'cog'; url: string };

/**
 * Where media and inputs live: folders under MEDIA_ROOT and INPUT_ROOT, or one S3 bucket. Without keys the
 * AWS SDK finds credentials itself (instance or task role, AWS_* variables).
 */
export type StorageSetting =
  | { kind: 'local' }
  | {
      kind: 's3';
      endpoint: string | undefined;
      region: string;
      bucket: string;
      credentials: { accessKeyId: string; secretAccessKey: string } | undefined;
      forcePathStyle: boolean;
    };

/** Every setting of the service, read from the environment once at boot. */
export class AppConfig {
  readonly role: Role;
  readonly host: string;
  readonly port: number;
  readonly logLevel: LogLevel;
  /** `pretty`: one readable line per event, for a person at a terminal; `json`: one JSON object per line. */
  readonly logFormat: 'auto' | 'json' | 'pretty';
  readonly publicBaseUrl: string;
  /**
   * The server the served contract (/openapi.json, /openapi.yaml, /docs) names, so Swagger UI's "Try it out"
   * calls the service: PUBLIC_BASE_URL when set; unset, the origin each request reached.
   */
  readonly contractServerUrl: string | undefined;
  /** Base of `output_url`: PUBLIC_BASE_URL (the /media route), or a CDN or bucket serving the media store. */
  readonly mediaPublicBaseUrl: string;
  /** Port of the separate Prometheus listener on HOST; 0: no listener. */
  readonly metricsPort: number;
  /** Unset means: run on the embedded PostgreSQL (PGlite) under `embeddedDbDir`. */
  readonly databaseUrl: string | undefined;
  readonly embeddedDbDir: string;
  readonly embeddedDbPort: number;
  readonly dbPoolSize: number;
  /** Connections of an API process's `StatementPipeline` (the reads clients poll), on top of the pool. */
  readonly dbPipelineConnections: number;
  readonly redisUrl: string;
  /** Namespace of every Redis key the service writes, so several deployments or test runs share one Redis. */
  readonly redisPrefix: string;
  readonly mediaRoot: string;
  readonly inputRoot: string;
  readonly storage: StorageSetting;
  readonly uploadTmpDir: string;
  readonly uploadMaxFileBytes: number;
  readonly uploadMaxParts: number;
  readonly imageMinSide: number;
  readonly imageMaxSide: number;
  readonly imageMaxPixels: number;
  readonly limitMaxPending: number;
  readonly limitCreationsPerMinute: number;
  readonly workerConcurrency: number;
  readonly jobAttempts: number;
  readonly jobBackoffMs: number;
  readonly jobDeadlineMs: number;
  /** How long a worker's claim on a job lasts without renewal; a killed worker's job is free after this. */
  readonly jobLockMs: number;
  /** How often workers look for jobs whose claim expired (stalled jobs) and take them back. */
  readonly jobStalledCheckMs: number;
  /** How long one engine call may take before it counts as a failed attempt. */
  readonly engineTimeoutMs: number;
  readonly reconcileIntervalMs: number;
  /** How long a final item is kept after `completed_at` (HISTORY_RETENTION); undefined: until its user deletes it. */
  readonly historyRetentionMs: number | undefined;
  /** How often the workers look for items past their retention; at most a minute, as the operators' guide says. */
  readonly retentionSweepIntervalMs: number;
  /** Webhooks may use plain http (development and tests only). */
  readonly webhookAllowHttp: boolean;
  /** Webhooks may reach loopback, private and link-local addresses (development and tests only). */
  readonly webhookAllowPrivateNetworks: boolean;
  /** Waits between a webhook's attempts: the Standard Webhooks schedule unless set. */
  readonly webhookRetryDelaysMs: readonly number[];
  readonly webhookTimeoutMs: number;
  /** How often an idle event stream sends a comment line, so proxies do not close it. */
  readonly eventStreamHeartbeatMs: number;
  readonly shutdownTimeoutMs: number;
  readonly authCacheTtlMs: number;
  /** 401s one client address may collect in a minute; beyond that it gets 429 before its key is even looked up. */
  readonly authFailuresPerMinute: number;
  /** How many reverse proxies' X-Forwarded-For entries to believe when telling clients apart; 0: the peer address. */
  readonly trustProxyHops: number;
  /** Browser origins allowed to call the API (CORS); empty: no CORS headers at all. */
  readonly corsOrigins: readonly string[];
  /** A connection with no traffic for this long is closed, so stalled uploads cannot hold sockets and temp files. */
  readonly httpIdleTimeoutMs: number;
  /** The model servers and the routes to them: the routing file (ENGINES_FILE) and `ENGINE_<TOOL>` shortcuts. */
  readonly engineRouting: EngineRouting;

  constructor(env: NodeJS.ProcessEnv) {
    const read = new EnvReader(env);
    this.role = read.oneOf('ROLE', ['api', 'worker', 'all', 'migrate'] as const, 'all');
    this.host = read.string('HOST', '0.0.0.0');
    this.port = read.int('PORT', 3000, 0, 65535);
    this.logLevel = read.oneOf(
      'LOG_LEVEL',
      ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const,
      'info',
    );
    this.logFormat = read.oneOf('LOG_FORMAT', ['auto', 'json', 'pretty'] as const, 'auto');
    this.contractServerUrl = read.optionalUrl('PUBLIC_BASE_URL')?.replace(/\/+$/, '');
    this.publicBaseUrl = this.contractServerUrl ?? `http://localhost:${this.port}`;
    this.mediaPublicBaseUrl = read.url('MEDIA_PUBLIC_BASE_URL', this.publicBaseUrl).replace(/\/+$/, '');
    this.metricsPort = read.int('METRICS_PORT', 0, 0, 65535);
    this.databaseUrl = read.optionalUrl('DATABASE_URL', ['postgres:', 'postgresql:']);
    this.embeddedDbDir = resolve(read.string('EMBEDDED_DB_DIR', './data/pglite'));
    this.embeddedDbPort = read.int('EMBEDDED_DB_PORT', 54329, 1, 65535);
    this.dbPoolSize = read.int('DB_POOL_SIZE', 10, 1, 1000);
    this.dbPipelineConnections = read.int('DB_PIPELINE_CONNECTIONS', 2, 1, 64);
    this.redisUrl = read.url('REDIS_URL', 'redis://127.0.0.1:6379', ['redis:', 'rediss:']);
    this.redisPrefix = read.string('REDIS_PREFIX', 'igs');
    this.mediaRoot = resolve(read.string('MEDIA_ROOT', './data/media'));
    this.inputRoot = resolve(read.string('INPUT_ROOT', './data/inputs'));
    this.storage = read.oneOf('STORAGE', ['local', 's3'] as const, 'local') === 's3' ? read.s3() : { kind: 'local' };
    this.uploadTmpDir = resolve(read.string('UPLOAD_TMP_DIR', './data/tmp'));
    this.uploadMaxFileBytes = read.int('UPLOAD_MAX_FILE_BYTES', 10 * 1024 * 1024, 1024, 1024 ** 3);
    this.uploadMaxParts = read.int('UPLOAD_MAX_PARTS', 10, 1, 100);
    this.imageMinSide = read.int('IMAGE_MIN_SIDE', 64, 1, 65535);
    this.imageMaxSide = read.int('IMAGE_MAX_SIDE', 8192, this.imageMinSide, 65535);
    this.imageMaxPixels = read.int('IMAGE_MAX_PIXELS', 40_000_000, 1, 1_000_000_000);
    this.limitMaxPending = read.int('LIMIT_MAX_PENDING', 10, 1, 1_000_000);
    this.limitCreationsPerMinute = read.int('LIMIT_CREATIONS_PER_MINUTE', 60, 1, 1_000_000);
    this.workerConcurrency = read.int('WORKER_CONCURRENCY', 2, 1, 256);
    this.jobAttempts = read.int('JOB_ATTEMPTS', 3, 1, 20);
    this.jobBackoffMs = read.int('JOB_BACKOFF_MS', 1000, 0, 3_600_000);
    this.jobDeadlineMs = read.int('JOB_DEADLINE_MS', 15 * 60_000, 1000, 7 * 24 * 3_600_000);
    this.jobLockMs = read.int('JOB_LOCK_MS', 30_000, 500, 3_600_000);
    this.jobStalledCheckMs = read.int('JOB_STALLED_CHECK_MS', 15_000, 100, 3_600_000);
    this.engineTimeoutMs = read.int('ENGINE_TIMEOUT_MS', 120_000, 100, 3_600_000);
    this.reconcileIntervalMs = read.int('RECONCILE_INTERVAL_MS', 30_000, 100, 3_600_000);
    this.historyRetentionMs = read.optionalDuration('HISTORY_RETENTION');
    this.retentionSweepIntervalMs = read.int('RETENTION_SWEEP_INTERVAL_MS', 60_000, 100, 60_000);
    this.eventStreamHeartbeatMs = read.int('EVENT_STREAM_HEARTBEAT_MS', 15_000, 100, 3_600_000);
    this.webhookAllowHttp = read.oneOf('WEBHOOK_ALLOW_HTTP', ['true', 'false'] as const, 'false') === 'true';
    this.webhookAllowPrivateNetworks =
      read.oneOf('WEBHOOK_ALLOW_PRIVATE_NETWORKS', ['true', 'false'] as const, 'false') === 'true';
    this.webhookRetryDelaysMs = read.intList(
      'WEBHOOK_RETRY_DELAYS_MS',
      STANDARD_WEBHOOK_RETRY_DELAYS_MS,
      0,
      7 * 86_400_000,
    );
    this.webhookTimeoutMs = read.int('WEBHOOK_TIMEOUT_MS', 10_000, 100, 600_000);
    this.shutdownTimeoutMs = read.int('SHUTDOWN_TIMEOUT_MS', 30_000, 0, 3_600_000);
    this.authCacheTtlMs = read.int('AUTH_CACHE_TTL_MS', 10_000, 0, 3_600_000);
    this.authFailuresPerMinute = read.int('AUTH_FAILURES_PER_MINUTE', 30, 1, 1_000_000);
    this.trustProxyHops = read.int('TRUST_PROXY', 0, 0, 10);
    this.corsOrigins = read.origins('CORS_ORIGINS');
    this.httpIdleTimeoutMs = read.int('HTTP_IDLE_TIMEOUT_MS', 60_000, 1000, 3_600_000);
    this.engineRouting = read.engineRouting(this.engineTimeoutMs);
    read.checkDeadline(this.engineRouting, this.jobDeadlineMs);
    read.throwIfInvalid();
  }

  get usesEmbeddedDatabase(): boolean {
    return this.databaseUrl === undefined;
  }

  get runsApi(): boolean {
    return this.role === 'api' || this.role === 'all';
  }

  get runsWorker(): boolean {
    return this.role === 'worker' || this.role === 'all';
  }
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Collects every bad variable before failing, so one boot names them all. */
class EnvReader {
  private readonly problems: string[] = [];

  constructor(private readonly env: NodeJS.ProcessEnv) {}

  private raw(name: string): string | undefined {
    const value = this.env[name]?.trim();
    return value === '' ? undefined : value;
  }

  string(name: string, fallback: string): string {
    return this.raw(name) ?? fallback;
  }

  int(name: string, fallback: number, min: number, max: number): number {
    const value = this.raw(name);
    if (value === undefined) return fallback;
    const parsed = /^-?\d+$/.test(value) ? Number(value) : NaN;
    if (!Number.isSafeInteger(parsed) || parsed < min || parsed > max) {
      this.problems.push(`${name} must be a whole number from ${min} to ${max}, got "${value}"`);
      return fallback;
    }
    return parsed;
  }

  oneOf<T extends string>(name: string, allowed: readonly T[], fallback: T): T {
    const value = this.raw(name);
    if (value === undefined) return fallback;
    if (!(allowed as readonly string[]).includes(value)) {
      this.problems.push(`${name} must be one of ${allowed.join(', ')}, got "${value}"`);
      return fallback;
    }
    return value as T;
  }

  /** `30d`, `12h`, `90s` (see `parseDuration`), at least a second; undefined when unset. */
  optionalDuration(name: string): number | undefined {
    const value = this.raw(name);
    if (value === undefined) return undefined;
    const ms = parseDuration(value);
    if (!(ms >= 1000)) {
      this.problems.push(`${name} must be a duration of at least a second such as 30d, 12h or 90s, got "${value}"`);
      return undefined;
    }
    return ms;
  }

  url(name: string, fallback: string, protocols?: string[]): string {
    return this.optionalUrl(name, protocols) ?? fallback;
  }

  optionalUrl(name: string, protocols: string[] = ['http:', 'https:']): string | undefined {
    const value = this.raw(name);
    if (value === undefined) return undefined;
    let protocol: string | undefined;
    try {
      protocol = new URL(value).protocol;
    } catch {
      protocol = undefined;
    }
    if (!protocol || !protocols.includes(protocol)) {
      // The value may hold a password, so it is never echoed.
      this.problems.push(`${name} must be a URL starting with ${protocols.map((p) => `${p}//`).join(' or ')}`);
      return undefined;
    }
    return value;
  }

  /** Exact origins as browsers send them in `Origin`: scheme, host and a non-default port; nothing else. */
  origins(name: string): string[] {
    const origins = (this.raw(name) ?? '')
      .split(',')
      .map((origin) => origin.trim())
      .filter((origin) => origin !== '');
    for (const origin of origins) {
      let parsed: URL | undefined;
      try {
        parsed = new URL(origin);
      } catch {
        parsed = undefined;
      }
      if (!parsed || !['http:', 'https:'].includes(parsed.protocol) || parsed.origin !== origin) {
        this.problems.push(
          `${name} must be comma-separated origins such as https://app.example.com (lower case, no path, no default port), got "${origin}"`,
        );
      }
    }
    return origins;
  }

  /** Comma-separated whole numbers, each from `min` to `max`. */
  intList(name: string, fallback: readonly number[], min: number, max: number): readonly number[] {
    const value = this.raw(name);
    if (value === undefined) return fallback;
    const numbers = value.split(',').map((part) => Number(part.trim()));
    if (numbers.some((n) => !Number.isSafeInteger(n) || n < min || n > max)) {
      this.problems.push(`${name} must be comma-separated whole numbers from ${min} to ${max}, got "${value}"`);
      return fallback;
    }
    return numbers;
  }

  /** The routing file's servers and routes, plus a server and a route for each `ENGINE_<TOOL>=cog:<url>`. */
  engineRouting(shortcutTimeoutMs: number): EngineRouting {
    const path = this.raw('ENGINES_FILE');
    const routing = {
      servers: [] as EngineRouting['servers'][number][],
      routes: [] as EngineRouting['routes'][number][],
    };
    if (path !== undefined) {
      const { file, problems } = readEnginesFile(path, this.env);
      this.problems.push(...problems);
      routing.servers.push(...file.servers);
      routing.routes.push(...file.routes);
    }
    for (const tool of CATALOG) {
      const name = `ENGINE_${tool.id.toUpperCase()}`;
      const shortcut = this.engine(name);
      if (shortcut.kind === 'local') continue;
      if (routing.routes.some((route) => route.tool === tool.id)) {
        this.problems.push(`${name} and ENGINES_FILE both route the tool "${tool.id}": keep one`);
        continue;
      }
      // A Cog server serves one model and runs one prediction at a time, whichever tools are sent to it.
      const serverName = `cog:${shortcut.url}`;
      if (!routing.servers.some((server) => server.name === serverName)) {
        const server: CogServerSetting = {
          name: serverName,
          kind: 'cog',
          url: shortcut.url,
          concurrency: 1,
          timeoutMs: shortcutTimeoutMs,
          headers: {},
        };
        routing.servers.push(server);
      }
      const route: CogRoute = {
        key: tool.id,
        tool: tool.id,
        generationType: undefined,
        engine: serverName,
        describe: {},
        kind: 'cog',
        inputs: Object.fromEntries(tool.inputs.map((input) => [input.name, input.name])),
        params: {},
        passGenerationType: true,
      };
      routing.routes.push(route);
    }
    return routing;
  }

  /** A job may run as long as its engine's timeout allows before the reconciler ends it `timeout`. */
  checkDeadline(routing: EngineRouting, jobDeadlineMs: number): void {
    for (const server of routing.servers) {
      if (server.timeoutMs > jobDeadlineMs) {
        this.problems.push(
          `JOB_DEADLINE_MS (${jobDeadlineMs} ms) is shorter than the timeout of engine "${server.name}" (${server.timeoutMs} ms): its jobs would be ended as timeout while the model still runs; raise JOB_DEADLINE_MS`,
        );
      }
    }
  }

  private engine(name: string): EngineShortcut {
    const value = this.raw(name);
    if (value === undefined || value === 'local') return { kind: 'local' };
    if (value.startsWith('cog:')) {
      const url = value.slice('cog:'.length);
      if (/^https?:\/\/[^/]/.test(url)) return { kind: 'cog', url: url.replace(/\/+$/, '') };
    }
    this.problems.push(`${name} must be "local" or "cog:<http(s) URL of a Cog server>", got "${value}"`);
    return { kind: 'local' };
  }

  s3(): StorageSetting {
    const bucket = this.raw('S3_BUCKET');
    if (bucket === undefined) this.problems.push('S3_BUCKET must be set when STORAGE=s3');
    const accessKeyId = this.raw('S3_ACCESS_KEY_ID');
    const secretAccessKey = this.raw('S3_SECRET_ACCESS_KEY');
    if ((accessKeyId === undefined) !== (secretAccessKey === undefined)) {
      this.problems.push('S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY must be set together, or both left unset');
    }
    return {
      kind: 's3',
      endpoint: this.optionalUrl('S3_ENDPOINT'),
      region: this.string('S3_REGION', 'us-east-1'),
      bucket: bucket ?? '',
      credentials: accessKeyId && secretAccessKey ? { accessKeyId, secretAccessKey } : undefined,
      forcePathStyle: this.oneOf('S3_FORCE_PATH_STYLE', ['true', 'false'] as const, 'false') === 'true',
    };
  }

  throwIfInvalid(): void {
    if (this.problems.length > 0) throw new ConfigError(this.problems);
  }
}

/** The one read of the process environment. */
export function loadConfig(): AppConfig {
  return new AppConfig(process.env);
}
