import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import * as keda from '@kubernetes-models/keda/keda.sh/v1alpha1';
import type { IScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1/ScaledObject';
import * as monitoring from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import type { IPrometheusRule } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule';
import type { IServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/ServiceMonitor';
import * as apps from 'kubernetes-models/apps/v1';
import type { IDeployment } from 'kubernetes-models/apps/v1/Deployment';
import * as autoscaling from 'kubernetes-models/autoscaling/v2';
import type { IHorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler';
import * as batch from 'kubernetes-models/batch/v1';
import type { IJob } from 'kubernetes-models/batch/v1/Job';
import * as networking from 'kubernetes-models/networking.k8s.io/v1';
import type { IIngress } from 'kubernetes-models/networking.k8s.io/v1/Ingress';
import * as policy from 'kubernetes-models/policy/v1';
import type { IPodDisruptionBudget } from 'kubernetes-models/policy/v1/PodDisruptionBudget';
import * as core from 'kubernetes-models/v1';
import type { IConfigMap } from 'kubernetes-models/v1/ConfigMap';
import type { IContainer } from 'kubernetes-models/v1/Container';
import type { IPodSpec } from 'kubernetes-models/v1/PodSpec';
import type { IService } from 'kubernetes-models/v1/Service';
import { parse, parseAllDocuments } from 'yaml';
import { readEnvironment } from '../../src/config/environment.js';
import { documentedSettings, imageCommand, imageEnvironment, REPO_ROOT, runToExit } from '../support/deployment.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { type S3Server, startS3Server } from '../support/s3rver.js';
import { freePort, type RunningService, startService } from '../support/service.js';

const KUBERNETES = join(REPO_ROOT, 'deploy/kubernetes');
const OVERLAYS = readdirSync(join(KUBERNETES, 'overlays')).sort();
/** The labels every object of the service itself carries (not the model servers'). */
const SERVICE_NAME_LABEL = 'app.kubernetes.io/name';
const SERVICE_NAME = 'igs';
/** What the alerts and the dashboard read: Compose's prometheus.yml scrapes the processes as this job. */
const PROMETHEUS_JOB = 'igs';

interface KubernetesObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [key: string]: unknown;
}

/** The schemas of every kind the manifests may hold, by apiVersion then kind. */
const MODELS: Record<string, Record<string, unknown>> = {
  v1: core,
  'apps/v1': apps,
  'batch/v1': batch,
  'policy/v1': policy,
  'autoscaling/v2': autoscaling,
  'networking.k8s.io/v1': networking,
  'keda.sh/v1alpha1': keda,
  'monitoring.coreos.com/v1': monitoring,
};

/** The problems of one object against its kind's schema (kubernetes-models and the KEDA and Prometheus Operator CRDs). */
function schemaProblems(object: KubernetesObject): string[] {
  const Model = MODELS[object.apiVersion]?.[object.kind] as (new (data: unknown) => { validate(): void }) | undefined;
  if (!Model) return [`${object.apiVersion} ${object.kind} ${object.metadata.name}: no schema for this kind`];
  try {
    new Model(object).validate();
    return [];
  } catch (error) {
    return [`${object.kind} ${object.metadata.name}: ${(error as Error).message}`];
  }
}

/** `kubectl kustomize` of an overlay (kubectl from Debian's `kubectl` or `kubernetes-client`; `.ci/run` installs it). */
function render(overlay: string): Promise<KubernetesObject[]> {
  return new Promise((resolve, reject) => {
    execFile('kubectl', ['kustomize', join(KUBERNETES, 'overlays', overlay)], { timeout: 60_000 }, (error, stdout) => {
      if (error) {
        reject(new Error(`kubectl kustomize overlays/${overlay} failed (is kubectl installed?): ${error.message}`));
        return;
      }
      resolve(parseAllDocuments(stdout).map((document) => document.toJS() as KubernetesObject));
    });
  });
}

function ofKind<T>(objects: KubernetesObject[], kind: string): (T & KubernetesObject)[] {
  return objects.filter((object) => object.kind === kind) as (T & KubernetesObject)[];
}

function named<T>(objects: KubernetesObject[], kind: string, name: string): T & KubernetesObject {
  const found = ofKind<T>(objects, kind).find((object) => object.metadata.name === name);
  if (!found) throw new Error(`no ${kind} ${name} in the rendered manifests`);
  return found;
}

/** A Deployment's or a Job's pod, with the object it belongs to. */
interface Workload {
  object: KubernetesObject;
  labels: Record<string, string>;
  pod: IPodSpec;
}

function workloads(objects: KubernetesObject[]): Workload[] {
  return [...ofKind<IDeployment>(objects, 'Deployment'), ...ofKind<IJob>(objects, 'Job')].map((object) => ({
    object,
    labels: object.spec!.template.metadata?.labels ?? {},
    pod: object.spec!.template.spec!,
  }));
}

/** The pods of the service itself: API, workers, the migration. */
function servicePods(objects: KubernetesObject[]): Workload[] {
  return workloads(objects).filter(
    (workload) => workload.object.metadata.labels?.[SERVICE_NAME_LABEL] === SERVICE_NAME,
  );
}

/** The one pod of the service that runs in this role (ROLE). */
function servicePod(objects: KubernetesObject[], role: string): Workload {
  const found = servicePods(objects).filter((pod) => valuesOf(serviceContainer(pod), objects).ROLE === role);
  expect(found).toHaveLength(1);
  return found[0];
}

/** The one container of a service pod. */
function serviceContainer(workload: Workload): IContainer {
  expect(workload.pod.containers).toHaveLength(1);
  return workload.pod.containers[0];
}

/** How a container gets one variable: a value, or a reference to a Secret or a field of its pod. */
interface Setting {
  name: string;
  value?: string;
  secret?: { name: string; key: string };
  field?: string;
}

/** Every variable a container sets: its ConfigMaps' (envFrom) first, then its own `env`, which wins. */
function settingsOf(container: IContainer, objects: KubernetesObject[]): Setting[] {
  const settings: Setting[] = [];
  for (const source of container.envFrom ?? []) {
    // A Secret's keys are not in the manifests: nobody could tell which variables it sets.
    if (!source.configMapRef) throw new Error(`${container.name}: envFrom other than a ConfigMap`);
    const configMap = named<IConfigMap>(objects, 'ConfigMap', source.configMapRef.name!);
    for (const [name, value] of Object.entries(configMap.data ?? {})) settings.push({ name, value });
  }
  for (const variable of container.env ?? []) {
    const from = variable.valueFrom;
    if (from?.secretKeyRef) {
      settings.push({ name: variable.name, secret: { name: from.secretKeyRef.name!, key: from.secretKeyRef.key } });
    } else if (from?.fieldRef) {
      settings.push({ name: variable.name, field: from.fieldRef.fieldPath });
    } else if (from) {
      throw new Error(`${container.name}: ${variable.name} comes from neither a Secret nor the pod's fields`);
    } else {
      settings.push({ name: variable.name, value: variable.value ?? '' });
    }
  }
  return settings;
}

/** The environment a container's process sees of the values the manifests give: the image's, then the pod's. */
function valuesOf(container: IContainer, objects: KubernetesObject[]): Record<string, string> {
  const values: Record<string, string> = { ...imageEnvironment() };
  for (const setting of settingsOf(container, objects)) {
    if (setting.value === undefined) delete values[setting.name];
    else values[setting.name] = setting.value;
  }
  return values;
}

function containerPort(container: IContainer, port: number | string | undefined): number | undefined {
  return typeof port === 'number' ? port : container.ports?.find((candidate) => candidate.name === port)?.containerPort;
}

/** The files a ConfigMap volume shows under its mount: every key, or the `items` it lists. */
function configMapFiles(configMap: IConfigMap, items?: { key: string; path: string }[]): Record<string, string> {
  const data = configMap.data ?? {};
  if (!items) return data;
  return Object.fromEntries(items.map((item) => [item.path, data[item.key]]));
}

/** The routing file a container reads (ENGINES_FILE), from the ConfigMap volume mounted at its folder. */
function routingFileOf(workload: Workload, objects: KubernetesObject[]): { path: string; text: string } | undefined {
  const container = serviceContainer(workload);
  const path = valuesOf(container, objects).ENGINES_FILE;
  if (path === undefined) return undefined;
  const mount = container.volumeMounts?.find((candidate) => candidate.mountPath === posix.dirname(path));
  if (!mount) throw new Error(`${container.name}: nothing is mounted at ${posix.dirname(path)} (ENGINES_FILE)`);
  // A subPath mount is a copy that a ConfigMap's change never reaches.
  expect(mount.subPath).toBeUndefined();
  const volume = workload.pod.volumes?.find((candidate) => candidate.name === mount.name);
  const configMap = named<IConfigMap>(objects, 'ConfigMap', volume!.configMap!.name!);
  const text = configMapFiles(configMap, volume!.configMap!.items)[posix.basename(path)];
  if (text === undefined)
    throw new Error(`${container.name}: ${path} is no file of ConfigMap ${configMap.metadata.name}`);
  return { path, text };
}

/** The `${VAR}`s a routing file reads from the environment: in its values, not its comments. */
function routingVariables(text: string): string[] {
  const strings = (node: unknown): string[] =>
    typeof node === 'string' ? [node] : typeof node === 'object' && node ? Object.values(node).flatMap(strings) : [];
  return strings(parse(text)).flatMap((value) =>
    [...value.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g)].map((match) => match[1]),
  );
}

/** Settings no manifest may hold in clear. */
function isSecretSetting(name: string): boolean {
  return /^(DATABASE_URL|REDIS_URL)$|SECRET|TOKEN|PASSWORD|_KEY$|_KEY_ID$/.test(name);
}

function selects(selector: Record<string, string> | undefined, labels: Record<string, string>): boolean {
  return selector !== undefined && Object.entries(selector).every(([key, value]) => labels[key] === value);
}

/** The milliseconds a preStop hook holds the container before SIGTERM: `sleep N`, or none. */
function preStopMs(container: IContainer): number {
  const command = container.lifecycle?.preStop?.exec?.command;
  if (!command) return 0;
  const [program, seconds] = command;
  if (program !== 'sleep' || command.length !== 2)
    throw new Error(`${container.name}: a preStop hook of unknown length`);
  return Number(seconds) * 1000;
}

/** The service's settings as it reads them from these values, defaults filled in; a wrong value fails the test. */
function settingsRead(values: Record<string, string>) {
  const { variables, problems } = readEnvironment(values);
  expect(problems).toEqual([]);
  return variables;
}

function readAlerts(): unknown {
  return parse(readFileSync(join(REPO_ROOT, 'deploy/prometheus/alerts.yml'), 'utf8'));
}

/** The paths the contract serves. */
function contractPaths(): string[] {
  const contract = parse(readFileSync(join(REPO_ROOT, 'openapi/openapi.yaml'), 'utf8')) as { paths: object };
  return Object.keys(contract.paths);
}

describe('the schema check', () => {
  it('refuses objects that break their schema', async () => {
    const objects = await render('production');
    const deployment = structuredClone(named<IDeployment>(objects, 'Deployment', 'igs-api'));
    deployment.spec!.replicas = 'two' as unknown as number;
    const scaledObject = structuredClone(named<IScaledObject>(objects, 'ScaledObject', 'igs-worker'));
    delete (scaledObject.spec as { scaleTargetRef?: unknown }).scaleTargetRef;
    const rule = structuredClone(named<IPrometheusRule>(objects, 'PrometheusRule', 'igs'));
    rule.spec.groups![0].rules![0].for = 5 as unknown as string;

    expect(schemaProblems(deployment)).toEqual([expect.stringContaining('replicas must be integer')]);
    expect(schemaProblems(scaledObject)).toEqual([expect.stringContaining('scaleTargetRef')]);
    expect(schemaProblems(rule)).toEqual([expect.stringContaining('for must be string')]);
    expect(schemaProblems({ ...deployment, apiVersion: 'apps/v1beta1' })).toEqual([
      expect.stringContaining('no schema for this kind'),
    ]);
  });
});

describe.each(OVERLAYS)('deploy/kubernetes/overlays/%s', (overlay) => {
  let objects: KubernetesObject[];
  let pods: Workload[];

  beforeAll(async () => {
    objects = await render(overlay);
    pods = servicePods(objects);
  });

  const podOfRole = (role: string) => servicePod(objects, role);

  it('renders the migration Job, API and worker Deployments, their Services and autoscalers, and monitoring', () => {
    const kinds = new Set(objects.map((object) => `${object.kind}/${object.metadata.name}`));

    for (const expected of [
      'Job/igs-migrate',
      'Deployment/igs-api',
      'Service/igs-api',
      'Ingress/igs-api',
      'PodDisruptionBudget/igs-api',
      'HorizontalPodAutoscaler/igs-api',
      'Deployment/igs-worker',
      'ScaledObject/igs-worker',
      'ServiceMonitor/igs',
      'PrometheusRule/igs',
      'ConfigMap/igs-routing',
    ]) {
      expect([expected, kinds.has(expected)]).toEqual([expected, true]);
    }
    expect(pods.map((pod) => valuesOf(serviceContainer(pod), objects).ROLE).sort()).toEqual([
      'api',
      'migrate',
      'worker',
    ]);
  });

  it('validates every object against its schema', () => {
    expect(objects.flatMap(schemaProblems)).toEqual([]);
  });

  it('sets only variables the service reads: the documented settings and what the routing file reads', () => {
    const documented = documentedSettings();

    for (const pod of pods) {
      const container = serviceContainer(pod);
      const routing = routingFileOf(pod, objects);
      const read = new Set([...documented, ...routingVariables(routing?.text ?? '')]);
      const unread = settingsOf(container, objects)
        .map((setting) => setting.name)
        .filter((name) => !read.has(name));

      expect([container.name, unread]).toEqual([container.name, []]);
    }
  });

  it('gives every variable the routing file reads to each process that reads the file', () => {
    for (const pod of pods) {
      const container = serviceContainer(pod);
      const routing = routingFileOf(pod, objects);
      const set = new Set(settingsOf(container, objects).map((setting) => setting.name));

      const missing = routingVariables(routing?.text ?? '').filter((name) => !set.has(name));

      expect([container.name, missing]).toEqual([container.name, []]);
    }
  });

  it('takes database and Redis addresses, storage keys and engine tokens from Secrets, and commits none', () => {
    expect(ofKind(objects, 'Secret')).toEqual([]);
    for (const configMap of ofKind<IConfigMap>(objects, 'ConfigMap')) {
      expect(Object.keys(configMap.data ?? {}).filter(isSecretSetting)).toEqual([]);
    }
    for (const pod of pods) {
      const container = serviceContainer(pod);
      const inClear = settingsOf(container, objects).filter(
        (setting) => isSecretSetting(setting.name) && setting.secret === undefined,
      );

      expect([container.name, inClear]).toEqual([container.name, []]);
    }
    const api = settingsOf(serviceContainer(podOfRole('api')), objects);
    for (const name of ['DATABASE_URL', 'REDIS_URL', 'S3_ACCESS_KEY_ID', 'S3_SECRET_ACCESS_KEY']) {
      expect(api.find((setting) => setting.name === name)?.secret).toEqual({
        name: expect.any(String),
        key: expect.any(String),
      });
    }
  });

  it("probes the API and the workers on the service's own health routes and port", () => {
    const paths = contractPaths();

    for (const role of ['api', 'worker']) {
      const container = serviceContainer(podOfRole(role));
      const port = Number(valuesOf(container, objects).PORT);
      const probes = {
        liveness: container.livenessProbe?.httpGet,
        readiness: container.readinessProbe?.httpGet,
        startup: container.startupProbe?.httpGet,
      };

      expect([role, probes.liveness?.path, probes.readiness?.path]).toEqual([role, '/health/live', '/health/ready']);
      for (const probe of Object.values(probes).filter((found) => found !== undefined)) {
        expect([role, probe.path, paths.includes(probe.path!)]).toEqual([role, probe.path, true]);
        expect([role, probe.path, containerPort(container, probe.port)]).toEqual([role, probe.path, port]);
      }
    }
  });

  it('gives every pod longer to stop than its preStop hook and SHUTDOWN_TIMEOUT_MS together', () => {
    for (const pod of pods.filter((candidate) => candidate.object.kind === 'Deployment')) {
      const container = serviceContainer(pod);
      const shutdownMs = settingsRead(valuesOf(container, objects)).SHUTDOWN_TIMEOUT_MS;
      const graceMs = (pod.pod.terminationGracePeriodSeconds ?? 30) * 1000;

      expect([container.name, graceMs > preStopMs(container) + shutdownMs]).toEqual([container.name, true]);
    }
  });

  it('runs the service as non-root on a read-only root file system, without capabilities, with requests and a memory limit', () => {
    for (const pod of pods) {
      const container = serviceContainer(pod);
      const security = { ...pod.pod.securityContext, ...container.securityContext };

      expect([container.name, security]).toEqual([
        container.name,
        expect.objectContaining({
          runAsNonRoot: true,
          // The image's user is a name (`node`): Kubernetes checks runAsNonRoot only against a number.
          runAsUser: expect.any(Number),
          readOnlyRootFilesystem: true,
          allowPrivilegeEscalation: false,
          capabilities: { drop: ['ALL'] },
          seccompProfile: { type: 'RuntimeDefault' },
        }),
      ]);
      expect(security.runAsUser).toBeGreaterThan(0);
      expect(pod.pod.automountServiceAccountToken).toBe(false);
    }
    for (const { pod } of workloads(objects)) {
      for (const container of pod.containers) {
        expect([container.name, container.resources]).toEqual([
          container.name,
          expect.objectContaining({
            requests: expect.objectContaining({ cpu: expect.anything(), memory: expect.anything() }),
            limits: expect.objectContaining({ memory: expect.anything() }),
          }),
        ]);
      }
    }
  });

  it('gives the API and the workers a writable volume where they write, and the routing file as a ConfigMap', () => {
    for (const role of ['api', 'worker']) {
      const pod = podOfRole(role);
      const container = serviceContainer(pod);
      const values = valuesOf(container, objects);
      const writable = (container.volumeMounts ?? []).filter((mount) => {
        const volume = pod.pod.volumes?.find((candidate) => candidate.name === mount.name);
        return !mount.readOnly && (volume?.emptyDir !== undefined || volume?.persistentVolumeClaim !== undefined);
      });
      const written = [
        values.UPLOAD_TMP_DIR,
        ...(values.STORAGE === 's3' ? [] : [values.MEDIA_ROOT, values.INPUT_ROOT]),
      ];

      for (const path of written) {
        const under = writable.some((mount) => path.startsWith(`${mount.mountPath}/`));
        expect([role, path, under]).toEqual([role, path, true]);
      }
      expect(routingFileOf(pod, objects)?.path).toBe(values.ENGINES_FILE);
    }
  });

  it('has the alerts of deploy/prometheus/alerts.yml as its PrometheusRule, exactly', () => {
    const rule = named<IPrometheusRule>(objects, 'PrometheusRule', 'igs');

    expect(rule.spec).toEqual(readAlerts());
  });

  it('scrapes every API and worker pod on its metrics port, as the job and with the role the alerts read', () => {
    const monitors = ofKind<IServiceMonitor>(objects, 'ServiceMonitor');
    for (const role of ['api', 'worker']) {
      const pod = podOfRole(role);
      const container = serviceContainer(pod);
      const metricsPort = Number(valuesOf(container, objects).METRICS_PORT);
      const scraped = monitors.flatMap((monitor) =>
        ofKind<IService>(objects, 'Service')
          .filter((service) => selects(monitor.spec.selector.matchLabels, service.metadata.labels ?? {}))
          .filter((service) => selects(service.spec!.selector, pod.labels))
          .flatMap((service) =>
            monitor.spec.endpoints.flatMap((endpoint) => {
              const port = service.spec!.ports!.find((candidate) => candidate.name === endpoint.port);
              if (!port) return [];
              const roleLabel = endpoint.relabelings?.find((relabel) => relabel.targetLabel === 'role');
              const [source] = roleLabel?.sourceLabels ?? [];
              const serviceLabel = /^__meta_kubernetes_service_label_(.+)$/.exec(source ?? '')?.[1];
              const labelOf = (label: string) =>
                Object.entries(service.metadata.labels ?? {}).find(
                  ([key]) => key.replace(/[^a-zA-Z0-9_]/g, '_') === label,
                )?.[1];
              return [
                {
                  job: service.metadata.labels?.[monitor.spec.jobLabel!],
                  role: serviceLabel && labelOf(serviceLabel),
                  port: containerPort(container, port.targetPort),
                  notReadyToo: service.spec!.publishNotReadyAddresses,
                },
              ];
            }),
          ),
      );

      expect([role, scraped]).toEqual([role, [{ job: PROMETHEUS_JOB, role, port: metricsPort, notReadyToo: true }]]);
    }
  });

  it('sends the Ingress to the API with event streams and waiting requests kept open, at PUBLIC_BASE_URL', () => {
    const api = podOfRole('api');
    const values = valuesOf(serviceContainer(api), objects);
    const heartbeatMs = settingsRead(values).EVENT_STREAM_HEARTBEAT_MS;
    for (const ingress of ofKind<IIngress>(objects, 'Ingress')) {
      const annotations = (ingress.metadata as { annotations?: Record<string, string> }).annotations ?? {};

      expect(annotations['nginx.ingress.kubernetes.io/proxy-buffering']).toBe('off');
      // `Prefer: wait` holds a request up to 60 s; an idle stream sends a heartbeat every EVENT_STREAM_HEARTBEAT_MS.
      const readTimeoutMs = Number(annotations['nginx.ingress.kubernetes.io/proxy-read-timeout']) * 1000;
      expect(readTimeoutMs).toBeGreaterThan(Math.max(60_000, heartbeatMs));
      const rules = ingress.spec!.rules!;
      expect(rules.map((rule) => rule.host)).toContain(new URL(values.PUBLIC_BASE_URL).hostname);
      for (const path of rules.flatMap((rule) => rule.http!.paths)) {
        const service = named<IService>(objects, 'Service', path.backend.service!.name);
        const port = service.spec!.ports!.find((candidate) => candidate.name === path.backend.service!.port!.name);

        expect(selects(service.spec!.selector, api.labels)).toBe(true);
        expect(containerPort(serviceContainer(api), port?.targetPort)).toBe(Number(values.PORT));
      }
    }
  });

  it('scales the API on CPU and keeps all but one replica through disruptions', () => {
    const api = podOfRole('api');
    const hpa = named<IHorizontalPodAutoscaler>(objects, 'HorizontalPodAutoscaler', 'igs-api');
    const budget = named<IPodDisruptionBudget>(objects, 'PodDisruptionBudget', 'igs-api');

    expect(hpa.spec.scaleTargetRef).toEqual({
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      name: api.object.metadata.name,
    });
    expect(hpa.spec.metrics).toEqual([
      expect.objectContaining({ type: 'Resource', resource: expect.objectContaining({ name: 'cpu' }) }),
    ]);
    expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
    expect(selects(budget.spec!.selector!.matchLabels, api.labels)).toBe(true);
    // The autoscalers own the counts: an apply must not reset them.
    for (const deployment of ofKind<IDeployment>(objects, 'Deployment'))
      expect(deployment.spec!.replicas).toBeUndefined();
  });

  it('scales the workers with KEDA on the jobs waiting and running, WORKER_CONCURRENCY each', () => {
    const worker = podOfRole('worker');
    const scaler = named<IScaledObject>(objects, 'ScaledObject', 'igs-worker');
    const [trigger] = scaler.spec.triggers;

    expect(scaler.spec.scaleTargetRef.name).toBe(worker.object.metadata.name);
    expect(scaler.spec.triggers).toHaveLength(1);
    expect(trigger.type).toBe('prometheus');
    expect(trigger.metadata.query).toContain('igs_queue_jobs{state="waiting"}');
    expect(Number(trigger.metadata.threshold)).toBe(
      settingsRead(valuesOf(serviceContainer(worker), objects)).WORKER_CONCURRENCY,
    );
  });
});

describe('the GPU pool of overlays/production-gpu', () => {
  let objects: KubernetesObject[];

  beforeAll(async () => {
    objects = await render('production-gpu');
  });

  it("routes tools to a pool found through a headless Service, scaled on the engine's waiting jobs, a slot per job", () => {
    const api = servicePod(objects, 'api');
    const routing = parse(routingFileOf(api, objects)!.text) as {
      engines: Record<string, { url?: string; discover?: string; concurrency?: number }>;
    };
    const pools = Object.entries(routing.engines).filter(([, engine]) => engine.discover === 'dns');
    expect(pools.length).toBeGreaterThan(0);

    for (const [name, engine] of pools) {
      const url = new URL(engine.url!.replace(/\$\{[A-Za-z_][A-Za-z0-9_]*\}/g, 'namespace'));
      const service = named<IService>(objects, 'Service', url.hostname.split('.')[0]);
      const model = ofKind<IDeployment>(objects, 'Deployment').find((deployment) =>
        selects(service.spec!.selector, deployment.spec!.template.metadata?.labels ?? {}),
      )!;
      const port = service.spec!.ports!.find((candidate) => candidate.port === Number(url.port));
      const scaler = ofKind<IScaledObject>(objects, 'ScaledObject').find(
        (candidate) => candidate.spec.scaleTargetRef.name === model.metadata.name,
      )!;
      const [trigger] = scaler.spec.triggers;

      // Headless: the name resolves to each ready pod, not to one virtual address.
      expect([name, service.spec!.clusterIP]).toEqual([name, 'None']);
      expect(containerPort(model.spec!.template.spec!.containers[0], port?.targetPort)).toBe(Number(url.port));
      expect(trigger.type).toBe('prometheus');
      expect(trigger.metadata.query).toContain(`igs_engine_jobs_waiting{engine="${name}"}`);
      expect(Number(trigger.metadata.threshold)).toBe(engine.concurrency ?? 1);
    }
  });
});

/**
 * No cluster here: the production overlay's migration, API and worker containers run as the built service, each with
 * exactly its manifest's environment, its Secrets' values taken from this machine's PostgreSQL, Redis and an
 * S3-compatible server, and its volumes as folders. Only the addresses and ports differ.
 */
describe('the production overlay, started here', () => {
  const NAMESPACE = 'igs-test';
  let env: TestEnvironment;
  let s3: S3Server;
  let objects: KubernetesObject[];
  const running: RunningService[] = [];

  beforeAll(async () => {
    objects = await render('production');
    env = await createTestEnvironment();
    const api = servicePod(objects, 'api');
    s3 = await startS3Server(valuesOf(serviceContainer(api), objects).S3_BUCKET);
  }, 60_000);

  afterAll(async () => {
    await Promise.all(running.map((service) => service.stop()));
    await s3?.stop();
    await env?.dispose();
  }, 60_000);

  /** What each Secret's key holds on this machine. */
  function secretValue(name: string, key: string): string {
    const values: Record<string, string> = {
      'igs-postgres/url': env.databaseUrl,
      'igs-redis/url': env.redisUrl,
      'igs-s3/access-key-id': s3.serviceEnv.S3_ACCESS_KEY_ID,
      'igs-s3/secret-access-key': s3.serviceEnv.S3_SECRET_ACCESS_KEY,
      'igs-media/signing-key': 'k'.repeat(48),
    };
    const value = values[`${name}/${key}`];
    if (value === undefined) throw new Error(`Secret ${name} key ${key}: no value for it here; add one to this test`);
    return value;
  }

  /** The container's environment, its volumes as folders here, on free ports of this machine. */
  async function environmentOf(pod: Workload): Promise<Record<string, string>> {
    const container = serviceContainer(pod);
    const values: Record<string, string> = { ...imageEnvironment() };
    for (const setting of settingsOf(container, objects)) {
      if (setting.secret) values[setting.name] = secretValue(setting.secret.name, setting.secret.key);
      else if (setting.field === 'metadata.namespace') values[setting.name] = NAMESPACE;
      else if (setting.value !== undefined) values[setting.name] = setting.value;
      else throw new Error(`${setting.name}: from ${setting.field}, which this test does not stand in for`);
    }
    const root = mkdtempSync(join(env.dataDir, `${container.name}-`));
    for (const mount of container.volumeMounts ?? []) {
      const here = join(root, mount.mountPath);
      mkdirSync(here, { recursive: true });
      const volume = pod.pod.volumes!.find((candidate) => candidate.name === mount.name)!;
      if (volume.configMap) {
        const files = configMapFiles(
          named<IConfigMap>(objects, 'ConfigMap', volume.configMap.name!),
          volume.configMap.items,
        );
        for (const [path, text] of Object.entries(files)) writeFileSync(join(here, path), text);
      }
      for (const [name, value] of Object.entries(values)) {
        if (value === mount.mountPath || value.startsWith(`${mount.mountPath}/`)) {
          values[name] = here + value.slice(mount.mountPath.length);
        }
      }
    }
    return {
      ...values,
      HOST: '127.0.0.1',
      PORT: String(await freePort()),
      METRICS_PORT: String(await freePort()),
      REDIS_PREFIX: env.redisPrefix,
      S3_ENDPOINT: s3.endpoint,
      S3_FORCE_PATH_STYLE: s3.serviceEnv.S3_FORCE_PATH_STYLE,
    };
  }

  const podOfRole = (role: string) => servicePod(objects, role);

  it('migrates, then API and workers answer their probes and scrapes, and stop cleanly on SIGTERM', async () => {
    const migrated = await runToExit(imageCommand(), await environmentOf(podOfRole('migrate')));
    expect(migrated).toMatchObject({ code: 0 });
    expect(migrated.output).toContain('The database schema is up to date');

    for (const role of ['api', 'worker']) {
      const pod = podOfRole(role);
      const container = serviceContainer(pod);
      const values = await environmentOf(pod);
      const service = await startService(values);
      running.push(service);

      for (const probe of [container.livenessProbe, container.readinessProbe, container.startupProbe]) {
        const path = probe?.httpGet?.path;
        if (path === undefined) continue;
        const response = await fetch(`${service.baseUrl}${path}`);
        expect([role, path, response.status]).toEqual([role, path, 200]);
      }
      const metrics = await fetch(`http://127.0.0.1:${values.METRICS_PORT}/metrics`);
      expect([role, metrics.status]).toEqual([role, 200]);
      expect(await metrics.text()).toContain('igs_queue_jobs');
    }

    for (const service of running.splice(0).reverse()) expect(await service.stop('SIGTERM')).toBe(0);
  }, 120_000);
});
