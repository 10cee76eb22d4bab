import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { type FakeCog, startFakeCog } from '../support/fake-cog.js';
import {
  cogEngine,
  createUser,
  final,
  type Processes,
  query,
  submit,
  TOOL,
  uniqueImage,
  waitUntil,
  WorkerWorld,
} from '../support/harness.js';
import { freePort, type RunningService } from '../support/service.js';

const DEPLOY = new URL('../../deploy/', import.meta.url).pathname;
const RULES = join(DEPLOY, 'prometheus/alerts.yml');
const RULE_TESTS = join(DEPLOY, 'prometheus/alerts.test.yml');
const DASHBOARD = join(DEPLOY, 'grafana/igs.json');

interface AlertRule {
  alert: string;
  expr: string;
  [key: string]: unknown;
}

interface RuleFile {
  groups: { name: string; rules: AlertRule[] }[];
}

function readRules(): RuleFile {
  return parse(readFileSync(RULES, 'utf8')) as RuleFile;
}

function alertRules(rules = readRules()): AlertRule[] {
  return rules.groups.flatMap((group) => group.rules);
}

/** Runs promtool (Debian's `prometheus` package; `.ci/run` installs it) and resolves with its exit code and output. */
function promtool(...args: string[]): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    execFile('promtool', args, { timeout: 60_000 }, (error, stdout, stderr) => {
      if (error && typeof error.code !== 'number') {
        reject(new Error(`promtool could not run (apt-get install -y prometheus): ${error.message}`));
        return;
      }
      resolve({ code: typeof error?.code === 'number' ? error.code : 0, output: stdout + stderr });
    });
  });
}

/** `promtool test rules` on the repository's tests, run against `rules` in place of alerts.yml. */
function testRulesAgainst(rules: RuleFile): Promise<{ code: number; output: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'igs-alerts-'));
  writeFileSync(join(dir, 'alerts.yml'), stringify(rules));
  copyFileSync(RULE_TESTS, join(dir, 'alerts.test.yml'));
  return promtool('test', 'rules', join(dir, 'alerts.test.yml'));
}

/** alerts.yml with `change` applied to one alert's rule. */
function withRule(alert: string, change: (rule: AlertRule) => void): RuleFile {
  const rules = readRules();
  const rule = alertRules(rules).find((candidate) => candidate.alert === alert);
  if (!rule) throw new Error(`no alert ${alert} in alerts.yml`);
  change(rule);
  return rules;
}

describe('deploy/prometheus', () => {
  it('has rules promtool accepts, loaded by a configuration promtool accepts', async () => {
    expect(await promtool('check', 'rules', RULES)).toMatchObject({ code: 0 });
    expect(await promtool('check', 'config', join(DEPLOY, 'prometheus/prometheus.yml'))).toMatchObject({ code: 0 });
  });

  it("passes the rules' unit tests", async () => {
    const sut = await promtool('test', 'rules', RULE_TESTS);

    expect(sut.output).toContain('SUCCESS');
    expect(sut.code).toBe(0);
  });

  it('fails the unit tests when a threshold is changed, naming the alert', async () => {
    const broken = withRule('IgsApi5xxRatio', (rule) => {
      rule.expr = rule.expr.replace('> 0.05', '> 0.1');
    });

    const sut = await testRulesAgainst(broken);

    expect(sut.code).toBe(1);
    expect(sut.output).toContain('alertname: IgsApi5xxRatio');
  });

  describe.each(alertRules().map((rule) => rule.alert))('%s', (alert) => {
    it('is seen to fire by the unit tests: they fail when it never fires', async () => {
      const sut = await testRulesAgainst(
        withRule(alert, (rule) => {
          rule.expr = 'vector(0) > 1';
        }),
      );

      expect(sut.code).toBe(1);
      expect(sut.output).toContain(`alertname: ${alert}`);
    });

    it('is seen to stay quiet by the unit tests: they fail when it also fires where it should not', async () => {
      // Unchanged where it fires (so the tests where it fires still pass), and firing wherever it would not.
      const sut = await testRulesAgainst(
        withRule(alert, (rule) => {
          rule.expr = `(${rule.expr}) or on() vector(1)`;
        }),
      );

      expect(sut.code).toBe(1);
      expect(sut.output).toContain(`alertname: ${alert}`);
    });
  });
});

const PROMQL_KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring']);

/** The metric names a PromQL expression reads: what is left once strings, matchers, ranges and label lists go. */
function metricNamesIn(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, '');
  // A name followed by `(` is a function or an aggregation.
  return [...bare.matchAll(/\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()/g)]
    .map((match) => match[1])
    .filter((word) => !PROMQL_KEYWORDS.has(word));
}

function dashboardExpressions(): string[] {
  const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: { targets?: { expr: string }[] }[] };
  return dashboard.panels.flatMap((panel) => (panel.targets ?? []).map((target) => target.expr));
}

/**
 * The metric names a scrape exposes: every family its `# TYPE` lines declare, a histogram's or a summary's
 * series (`_bucket`, `_sum`, `_count`) counted as the family.
 */
function exposedNames(exposition: string): Map<string, string> {
  const names = new Map<string, string>();
  for (const [, name, type] of exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    names.set(name, name);
    if (type === 'histogram' || type === 'summary') {
      for (const suffix of ['_bucket', '_sum', '_count']) names.set(`${name}${suffix}`, name);
    }
  }
  return names;
}

async function scrapeText(metricsPort: string): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
  expect(response.status).toBe(200);
  return response.text();
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;

/** The value of the one sample of `name` with exactly these labels, from an exposition; undefined when absent. */
function sampleValue(exposition: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of exposition.split('\n')) {
    const match = SAMPLE.exec(line);
    if (match?.[1] !== name) continue;
    const found = Object.fromEntries(
      [...(match[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map(([, key, value]) => [key, value]),
    );
    if (JSON.stringify(Object.entries(found).sort()) === JSON.stringify(Object.entries(labels).sort())) {
      return Number(match[3]);
    }
  }
  return undefined;
}

describe('the metrics the alerts and the dashboard read', () => {
  /** Longer than the pending ages the tests make up, except the one made to be past it. */
  const DEADLINE_MS = 20 * 60_000;
  let world: WorkerWorld;
  let processes: Processes;
  /** A second model server, for the fabric tool, that the last test takes down. */
  let fabricCog: FakeCog;
  let fabricCogClosed = false;
  let api: RunningService;
  const ports = { api: '', worker: '' };
  let key: string;
  let userId: string;

  beforeAll(async () => {
    world = await WorkerWorld.create();
    processes = world.processes;
    fabricCog = await startFakeCog();
    ports.api = String(await freePort());
    ports.worker = String(await freePort());
    const settings = {
      ...cogEngine(world.fake),
      ENGINE_FABRIC: `cog:${fabricCog.url}`,
      JOB_DEADLINE_MS: String(DEADLINE_MS),
      ENGINE_TIMEOUT_MS: String(DEADLINE_MS),
      // The timeout test waits for the reconciler's sweep: a sweep a second keeps the wait far below final()'s 30 s.
      RECONCILE_INTERVAL_MS: '1000',
    };
    [api] = await Promise.all([
      processes.start('api', { ...settings, METRICS_PORT: ports.api }),
      processes.start('worker', { ...settings, METRICS_PORT: ports.worker }),
    ]);
    ({ key, userId } = await createUser(world.env));
  }, 60_000);

  afterAll(async () => {
    await world?.dispose();
    if (!fabricCogClosed) await fabricCog?.close();
  }, 60_000);

  it('are all exported by the API and worker processes once a job has run', async () => {
    const id = await submit(api.baseUrl, key, await uniqueImage());
    expect((await final(api.baseUrl, key, id)).status).toBe('complete');
    const exported = new Map([
      ...exposedNames(await scrapeText(ports.api)),
      ...exposedNames(await scrapeText(ports.worker)),
    ]);

    const used = {
      alerts: new Set(alertRules().flatMap((rule) => metricNamesIn(rule.expr))),
      dashboard: new Set(dashboardExpressions().flatMap(metricNamesIn)),
    };

    expect([...used.alerts].filter((name) => !exported.has(name))).toEqual([]);
    expect([...used.dashboard].filter((name) => !exported.has(name))).toEqual([]);
    // The parse found the metrics, not nothing.
    expect(used.alerts).toContain('igs_jobs_total');
    expect(used.dashboard).toContain('igs_engine_duration_seconds_bucket');
    // And the dashboard shows every metric of the service's own.
    const shown = new Set([...used.dashboard].map((name) => exported.get(name)));
    const own = new Set([...exported.values()].filter((name) => name.startsWith('igs_')));
    expect([...own].filter((name) => !shown.has(name))).toEqual([]);
  }, 60_000);

  it('report PostgreSQL, Redis and each model server as reachable', async () => {
    for (const port of [ports.api, ports.worker]) {
      const sut = await scrapeText(port);

      expect(sampleValue(sut, 'igs_dependency_up', { dependency: 'postgresql' })).toBe(1);
      expect(sampleValue(sut, 'igs_dependency_up', { dependency: 'redis' })).toBe(1);
      expect(sampleValue(sut, 'igs_engine_up', { engine: `cog:${world.fake.url}`, kind: 'cog' })).toBe(1);
      expect(sampleValue(sut, 'igs_engine_up', { engine: `cog:${fabricCog.url}`, kind: 'cog' })).toBe(1);
    }
  });

  it('report the age of the oldest pending item, and 0 once none is pending', async () => {
    // A job the worker holds: its engine runs until canceled.
    world.fake.behave(() => ({ kind: 'hang' }));
    const id = await submit(api.baseUrl, key, await uniqueImage());
    await query(world.env, `UPDATE history_items SET created_at = now() - interval '10 minutes' WHERE id = $1`, [id]);

    const pending = sampleValue(await scrapeText(ports.api), 'igs_oldest_pending_job_age_seconds');

    expect(pending).toBeGreaterThanOrEqual(600);
    expect(pending).toBeLessThan(660);
    const canceled = await fetch(`${api.baseUrl}/user/generation-history/${id}/cancel`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}` },
    });
    expect(canceled.status).toBe(200);
    expect(sampleValue(await scrapeText(ports.worker), 'igs_oldest_pending_job_age_seconds')).toBe(0);
    world.fake.behave(() => ({ kind: 'succeed' }));
  }, 60_000);

  it('count the items the reconciler ended as timeout', async () => {
    const before = sampleValue(await scrapeText(ports.worker), 'igs_reconciler_items_total', { action: 'timeout' });
    expect(before).toBe(0);
    // Pending past the deadline, its job lost: the reconciler ends it without running it.
    const id = randomUUID();
    await query(
      world.env,
      `INSERT INTO history_items (id, user_id, tool, generation_type, status, inputs, texts, created_at, updated_at)
       VALUES ($1, $2, $3, 'product_card', 'pending', '{}', '{}', now() - interval '30 minutes', now() - interval '30 minutes')`,
      [id, userId, TOOL],
    );

    expect((await final(api.baseUrl, key, id)).error?.code).toBe('timeout');
    // The client can see the item end a moment before the reconciler, which ended it, has counted it.
    const counted = async () =>
      sampleValue(await scrapeText(ports.worker), 'igs_reconciler_items_total', { action: 'timeout' });
    await waitUntil(async () => ((await counted()) ?? 0) > 0, 'the reconciler to count the item it ended');
    expect(await counted()).toBe(1);
    expect(sampleValue(await scrapeText(ports.api), 'igs_reconciler_items_total', { action: 'timeout' })).toBe(0);
  }, 60_000);

  it('report a model server that stops answering as 0, and the others still as 1', async () => {
    await fabricCog.close();
    fabricCogClosed = true;

    const sut = await scrapeText(ports.worker);

    expect(sampleValue(sut, 'igs_engine_up', { engine: `cog:${fabricCog.url}`, kind: 'cog' })).toBe(0);
    expect(sampleValue(sut, 'igs_engine_up', { engine: `cog:${world.fake.url}`, kind: 'cog' })).toBe(1);
  });
});
