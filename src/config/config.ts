import { resolve } from 'node:path';
import { BUILT_IN, type Catalog, CATALOG } from '../catalog/catalog.js';
import { ENGINE_KINDS } from '../engines/engine-kinds.js';
import { parseDuration } from './duration.js';
import type { CogRoute, CogServerSetting, EngineRouting } from './engine-settings.js';
import { readEnginesFile } from './engines-file.js';
import { type EnvironmentVariables, givenIn, type LogLevel, readEnvironment, type Role } from './environment.js';

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

/** Every setting of the service, read from the environment (`EnvironmentVariables`) once at boot. */
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
  /** Signs media URLs; unset only on the embedded default, which makes and keeps one (`MediaUrls`). */
  readonly mediaSigningKey: string | undefined;
  /** The key before a rotation: what it signed still verifies. */
  readonly mediaSigningKeyPrevious: string | undefined;
  /** How long a signed media URL works (MEDIA_URL_TTL). */
  readonly mediaUrlTtlMs: number;
  /** `proxy`: the /media route sends the bytes; `presigned` (S3 only): it redirects to a presigned GET of the bucket. */
  readonly mediaDelivery: 'proxy' | 'presigned';
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
  /**
   * Largest image, in pixels, a model server may send back and the worker decodes: above the upload limit, since an
   * upscaler's result of a large photo is larger than any upload may be.
   */
  readonly outputMaxPixels: number;
  readonly limitMaxPending: number;
  readonly limitCreationsPerMinute: number;
  /** A user's job creations whose upload is still being received, at once (in every API process together). */
  readonly limitConcurrentUploads: number;
  /** A user's open event streams, item and user streams together. */
  readonly limitEventStreams: number;
  /** A user's requests held by `Prefer: wait`, item reads and job creations together. */
  readonly limitHeldRequests: number;
  readonly workerConcurrency: number;
  readonly jobAttempts: number;
  readonly jobBackoffMs: number;
  readonly jobDeadlineMs: number;
  /** How long a worker's claim on a job lasts without renewal; a killed worker's job is free after this. */
  readonly jobLockMs: number;
  /** How often workers look for jobs whose claim expired (stalled jobs) and take them back. */
  readonly jobStalledCheckMs: number;
  /**
   * How often a worker re-reads the state of the jobs it runs, so that a cancel, delete or deadline whose event was
   * lost still stops the model.
   */
  readonly jobStateCheckMs: number;
  /** How long one engine call may take before it counts as a failed attempt. */
  readonly engineTimeoutMs: number;
  readonly reconcileIntervalMs: number;
  /** Webhooks may use plain http (development and tests only). */
  readonly webhookAllowHttp: boolean;
  /** Webhooks may reach loopback, private and link-local addresses (development and tests only). */
  readonly webhookAllowPrivateNetworks: boolean;
  /** Waits between a webhook's attempts: the Standard Webhooks schedule unless set. */
  readonly webhookRetryDelaysMs: readonly number[];
  readonly webhookTimeoutMs: number;
  /** How long a stored file (`POST /files`) is kept after its upload (FILE_TTL). */
  readonly fileTtlMs: number;
  /** How long fetching one image URL of a JSON job may take, redirects included (URL_FETCH_TIMEOUT). */
  readonly urlFetchTimeoutMs: number;
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
  /**
   * The model servers and the routes to them: the routing file (ENGINES_FILE) and `ENGINE_<TOOL>` shortcuts, as read at
   * boot. The file may change while the service runs: `LiveRouting` holds the one in use.
   */
  readonly engineRouting: EngineRouting;
  /** The tools offered, as read at boot: the built-in ones and the routing file's `tools:` section. */
  readonly catalog: Catalog;
  /** Where the routing file is; undefined when there is none. */
  readonly enginesFile: string | undefined;
  private readonly env: NodeJS.ProcessEnv;
  private readonly variables: EnvironmentVariables;
  /** How long a final item is kept after `completed_at` (HISTORY_RETENTION); undefined: until its user deletes it. */
  readonly historyRetentionMs: number | undefined;
  /** How often the workers look for items past their retention; at most a minute, as the operators' guide says. */
  readonly retentionSweepIntervalMs: number;

  constructor(env: NodeJS.ProcessEnv) {
    const { variables: read, problems } = readEnvironment(env);
    this.role = read.ROLE;
    this.host = read.HOST;
    this.port = read.PORT;
    this.logLevel = read.LOG_LEVEL;
    this.logFormat = read.LOG_FORMAT;
    this.contractServerUrl = read.PUBLIC_BASE_URL?.replace(/\/+$/, '');
    this.publicBaseUrl = this.contractServerUrl ?? `http://localhost:${this.port}`;
    this.mediaPublicBaseUrl = (read.MEDIA_PUBLIC_BASE_URL ?? this.publicBaseUrl).replace(/\/+$/, '');
    this.mediaSigningKey = read.MEDIA_SIGNING_KEY;
    this.mediaSigningKeyPrevious = read.MEDIA_SIGNING_KEY_PREVIOUS;
    this.mediaUrlTtlMs = parseDuration(read.MEDIA_URL_TTL);
    this.mediaDelivery = read.MEDIA_DELIVERY;
    this.metricsPort = read.METRICS_PORT;
    this.databaseUrl = read.DATABASE_URL;
    this.embeddedDbDir = resolve(read.EMBEDDED_DB_DIR);
    this.embeddedDbPort = read.EMBEDDED_DB_PORT;
    this.dbPoolSize = read.DB_POOL_SIZE;
    this.dbPipelineConnections = read.DB_PIPELINE_CONNECTIONS;
    this.redisUrl = read.REDIS_URL;
    this.redisPrefix = read.REDIS_PREFIX;
    this.mediaRoot = resolve(read.MEDIA_ROOT);
    this.inputRoot = resolve(read.INPUT_ROOT);
    this.storage =
      read.STORAGE === 's3'
        ? {
            kind: 's3',
            endpoint: read.S3_ENDPOINT,
            region: read.S3_REGION,
            bucket: read.S3_BUCKET ?? '',
            credentials:
              read.S3_ACCESS_KEY_ID && read.S3_SECRET_ACCESS_KEY
                ? { accessKeyId: read.S3_ACCESS_KEY_ID, secretAccessKey: read.S3_SECRET_ACCESS_KEY }
                : undefined,
            forcePathStyle: read.S3_FORCE_PATH_STYLE,
          }
        : { kind: 'local' };
    this.uploadTmpDir = resolve(read.UPLOAD_TMP_DIR);
    this.uploadMaxFileBytes = read.UPLOAD_MAX_FILE_BYTES;
    this.uploadMaxParts = read.UPLOAD_MAX_PARTS;
    this.imageMinSide = read.IMAGE_MIN_SIDE;
    this.imageMaxSide = read.IMAGE_MAX_SIDE ?? 8192;
    this.imageMaxPixels = read.IMAGE_MAX_PIXELS;
    this.outputMaxPixels = read.OUTPUT_MAX_PIXELS;
    this.limitMaxPending = read.LIMIT_MAX_PENDING;
    this.limitCreationsPerMinute = read.LIMIT_CREATIONS_PER_MINUTE;
    this.limitConcurrentUploads = read.LIMIT_CONCURRENT_UPLOADS;
    this.limitEventStreams = read.LIMIT_EVENT_STREAMS;
    this.limitHeldRequests = read.LIMIT_HELD_REQUESTS;
    this.workerConcurrency = read.WORKER_CONCURRENCY;
    this.jobAttempts = read.JOB_ATTEMPTS;
    this.jobBackoffMs = read.JOB_BACKOFF_MS;
    this.jobDeadlineMs = read.JOB_DEADLINE_MS;
    this.jobLockMs = read.JOB_LOCK_MS;
    this.jobStalledCheckMs = read.JOB_STALLED_CHECK_MS;
    this.jobStateCheckMs = read.JOB_STATE_CHECK_MS;
    this.engineTimeoutMs = read.ENGINE_TIMEOUT_MS;
    this.reconcileIntervalMs = read.RECONCILE_INTERVAL_MS;
    this.eventStreamHeartbeatMs = read.EVENT_STREAM_HEARTBEAT_MS;
    this.webhookAllowHttp = read.WEBHOOK_ALLOW_HTTP;
    this.webhookAllowPrivateNetworks = read.WEBHOOK_ALLOW_PRIVATE_NETWORKS;
    this.webhookRetryDelaysMs = read.WEBHOOK_RETRY_DELAYS_MS;
    this.webhookTimeoutMs = read.WEBHOOK_TIMEOUT_MS;
    this.fileTtlMs = parseDuration(read.FILE_TTL);
    this.urlFetchTimeoutMs = parseDuration(read.URL_FETCH_TIMEOUT);
    this.shutdownTimeoutMs = read.SHUTDOWN_TIMEOUT_MS;
    this.historyRetentionMs = read.HISTORY_RETENTION === undefined ? undefined : parseDuration(read.HISTORY_RETENTION);
    this.retentionSweepIntervalMs = read.RETENTION_SWEEP_INTERVAL_MS;
    this.authCacheTtlMs = read.AUTH_CACHE_TTL_MS;
    this.authFailuresPerMinute = read.AUTH_FAILURES_PER_MINUTE;
    this.trustProxyHops = read.TRUST_PROXY;
    this.corsOrigins = read.CORS_ORIGINS;
    this.httpIdleTimeoutMs = read.HTTP_IDLE_TIMEOUT_MS;
    this.env = env;
    this.variables = read;
    this.enginesFile = read.ENGINES_FILE === undefined ? undefined : resolve(read.ENGINES_FILE);
    const routing = this.routingProblems();
    this.engineRouting = routing.engineRouting;
    this.catalog = routing.catalog;
    problems.push(...routing.problems);
    if (this.mediaDelivery === 'presigned' && this.storage.kind !== 's3') {
      problems.push('MEDIA_DELIVERY=presigned needs STORAGE=s3: only a bucket can answer a presigned URL');
    }
    if (problems.length > 0) throw new ConfigError(problems);
  }

  /**
   * The routing file read again, with the boot's checks (the environment is the boot's): a `ConfigError` naming every
   * problem when it does not pass them.
   */
  readRouting(): { engineRouting: EngineRouting; catalog: Catalog } {
    const { problems, ...routing } = this.routingProblems();
    if (problems.length > 0) throw new ConfigError(problems);
    return routing;
  }

  private routingProblems(): { engineRouting: EngineRouting; catalog: Catalog; problems: string[] } {
    const problems: string[] = [];
    const { routing, catalog } = engineRouting(this.env, this.variables, problems);
    problems.push(...deadlineProblems(routing, this.jobDeadlineMs));
    return { engineRouting: routing, catalog, problems };
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

/**
 * The routing file's servers and routes, plus a server and a route for each `ENGINE_<TOOL>=cog:<url>`; their
 * problems join `problems`. The shortcuts are read here, not in the DTO: their names come from the catalog.
 */
function engineRouting(
  env: NodeJS.ProcessEnv,
  read: EnvironmentVariables,
  problems: string[],
): { routing: EngineRouting; catalog: Catalog } {
  const routing = {
    servers: [] as EngineRouting['servers'][number][],
    routes: [] as EngineRouting['routes'][number][],
  };
  let catalog = BUILT_IN;
  if (read.ENGINES_FILE !== undefined) {
    const { file, problems: fileProblems } = readEnginesFile(read.ENGINES_FILE, env, ENGINE_KINDS);
    problems.push(...fileProblems);
    routing.servers.push(...file.servers);
    routing.routes.push(...file.routes);
    catalog = file.catalog;
  }
  const given = givenIn(env);
  problems.push(...misnamedShortcuts(given));
  for (const tool of CATALOG) {
    const name = `ENGINE_${tool.id.toUpperCase()}`;
    const shortcut = engineShortcut(name, given[name], problems);
    if (shortcut.kind === 'local') continue;
    if (routing.routes.some((route) => route.tool === tool.id)) {
      problems.push(`${name} and ENGINES_FILE both route the tool "${tool.id}": keep one`);
      continue;
    }
    // A Cog server serves one model and runs one prediction at a time, whichever tools are sent to it.
    const serverName = `cog:${shortcut.url}`;
    if (!routing.servers.some((server) => server.name === serverName)) {
      const server: CogServerSetting = {
        name: serverName,
        kind: 'cog',
        url: shortcut.url,
        urls: [shortcut.url],
        discover: undefined,
        concurrency: 1,
        timeoutMs: read.ENGINE_TIMEOUT_MS,
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
  return { routing, catalog };
}

/**
 * `ENGINE_<NAME>=local` or `=cog:...` for a name that is no tool's (`ENGINE_FABRC`): taken silently, the tool meant would
 * run on the local engine. Other `ENGINE_` variables may be anyone's (a routing file's `${VAR}`), so only a shortcut's
 * value makes one a mistake.
 */
function misnamedShortcuts(given: Record<string, string>): string[] {
  const names = new Set(CATALOG.map((tool) => `ENGINE_${tool.id.toUpperCase()}`));
  return Object.entries(given)
    .filter(([name, value]) => name.startsWith('ENGINE_') && !names.has(name) && /^(local$|cog:)/.test(value))
    .map(([name]) => `${name} names no tool: the shortcuts are ${[...names].join(', ')}`);
}

function engineShortcut(name: string, value: string | undefined, problems: string[]): EngineShortcut {
  if (value === undefined || value === 'local') return { kind: 'local' };
  const url = value.startsWith('cog:') ? parsedUrl(value.slice('cog:'.length)) : undefined;
  if (url && ['http:', 'https:'].includes(url.protocol) && url.hostname) {
    // The shortcut's URL is its server's name, and names are written in log lines, span attributes and Redis keys.
    if (url.username || url.password) {
      problems.push(
        `${name} must not hold credentials in its URL ("${withoutCredentials(value)}"): it names the server in logs, traces and Redis keys; route the tool with ENGINES_FILE and send them in its engine's headers`,
      );
      return { kind: 'local' };
    }
    return { kind: 'cog', url: value.slice('cog:'.length).replace(/\/+$/, '') };
  }
  problems.push(`${name} must be "local" or "cog:<http(s) URL of a Cog server>", got "${withoutCredentials(value)}"`);
  return { kind: 'local' };
}

function parsedUrl(text: string): URL | undefined {
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}

/** A value for a message, its URL's user and password (`//user:pass@`) left out. */
function withoutCredentials(value: string): string {
  return value.replace(/\/\/[^/@]*@/, '//…@');
}

/** A job may run as long as its engine's timeout allows before the reconciler ends it `timeout`. */
function deadlineProblems(routing: EngineRouting, jobDeadlineMs: number): string[] {
  return routing.servers
    .filter((server) => server.timeoutMs > jobDeadlineMs)
    .map(
      (server) =>
        `JOB_DEADLINE_MS (${jobDeadlineMs} ms) is shorter than the timeout of engine "${server.name}" (${server.timeoutMs} ms): its jobs would be ended as timeout while the model still runs; raise JOB_DEADLINE_MS`,
    );
}

/**
 * What a serving process (api, worker, all) needs beyond `AppConfig`'s checks, which the `igs` command line and
 * `ROLE=migrate` do not: on PostgreSQL every replica must sign media URLs with one key, which only the operator
 * can give them all.
 */
export function assertServingSettings(config: AppConfig): void {
  if (config.role === 'migrate' || !config.databaseUrl || config.mediaSigningKey) return;
  throw new ConfigError([
    'MEDIA_SIGNING_KEY must be set when DATABASE_URL is: every API and worker process signs and checks media URLs ' +
      'with it (the same value on all of them, at least 32 characters, e.g. the output of openssl rand -base64 48)',
  ]);
}

/** The one read of the process environment. */
export function loadConfig(): AppConfig {
  return new AppConfig(process.env);
}

/**
 * The settings with another routing file, read as the service reads its own at boot and on a change (`igs routing
 * check`): a `ConfigError` naming every problem when it does not pass.
 */
export function loadConfigWithRouting(file: string): AppConfig {
  return new AppConfig({ ...process.env, ENGINES_FILE: file });
}
