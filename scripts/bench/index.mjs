#!/usr/bin/env node
/**
 * Benchmark suite of the image generation service: `npm run bench` (builds, then runs all benches) or
 * `node scripts/bench/index.mjs <name> [<name>...]` to run some (after `npm run build`).
 *
 * Each bench runs the BUILT service (dist/main.js) as child processes on 127.0.0.1, with a database
 * and a Redis prefix of its own (the tests' harness, test/support) that are removed at the end, even on failure.
 * Figures are printed, never asserted; the summary table is also written into docs/performance.md, between its
 * bench markers (rows of benches not run this time are kept from the previous run, with their date, in last-run.json).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { DIST, interrupted, log, results, ROOT, runAllCleanups } from './lib.mjs';

const BENCHES = {
  create: () => import('./benches/create.mjs'),
  inputs: () => import('./benches/inputs.mjs'),
  embedded: () => import('./benches/embedded.mjs'),
  latency: () => import('./benches/latency.mjs'),
  worker: () => import('./benches/worker.mjs'),
  'upload-rss': () => import('./benches/upload-rss.mjs'),
  history: () => import('./benches/history.mjs'),
  retention: () => import('./benches/retention.mjs'),
  push: () => import('./benches/push.mjs'),
  comfyui: () => import('./benches/comfyui.mjs'),
  person: () => import('./benches/person.mjs'),
  remote: () => import('./benches/remote.mjs'),
  pool: () => import('./benches/pool.mjs'),
  frontend: () => import('./benches/frontend.mjs'),
  tracing: () => import('./benches/tracing.mjs'),
  slots: () => import('./benches/slots.mjs'),
  load: () => import('./load.mjs'),
};

const HERE = fileURLToPath(new URL('.', import.meta.url));
/** The figures' one page: the table goes between these markers. */
const PERFORMANCE_MD = `${ROOT}docs/performance.md`;
const TABLE_BEGIN = '<!-- bench:begin -->';
const TABLE_END = '<!-- bench:end -->';
const LAST_RUN_JSON = `${HERE}last-run.json`;

const args = process.argv.slice(2);
if (args.includes('--help') || args.includes('-h')) {
  log(`usage: node scripts/bench/index.mjs [${Object.keys(BENCHES).join('|')} ...]`);
  process.exit(0);
}
const unknown = args.filter((name) => !(name in BENCHES));
if (unknown.length > 0) {
  console.error(`unknown bench: ${unknown.join(', ')}; choose from ${Object.keys(BENCHES).join(', ')}`);
  process.exit(2);
}
if (!existsSync(`${DIST}/main.js`)) {
  console.error('dist/main.js is missing: run `npm run build` first (`npm run bench` builds).');
  process.exit(2);
}
const selected = args.length > 0 ? args : Object.keys(BENCHES);

const machine = `${cpus().length} x ${cpus()[0]?.model?.trim() ?? 'cpu'}, Node ${process.version}`;
const commit = (() => {
  try {
    const sha = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src'], { cwd: ROOT, encoding: 'utf8' }).trim();
    return dirty ? `${sha} (src/ modified)` : sha;
  } catch {
    return 'unknown';
  }
})();
log(`# bench: ${selected.join(', ')} — ${machine}, commit ${commit}`);

const started = performance.now();
const status = {};
const load = {};
const loadText = () =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(' ');
/**
 * The machine's CPU time so far, in ticks: all of it, and what the hypervisor gave other guests (steal) while this
 * one's virtual CPUs were ready to run. Undefined where /proc/stat is not Linux's.
 */
function cpuTicks() {
  try {
    const [, ...fields] = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).map(Number);
    // user nice system idle iowait irq softirq steal; guest and guest_nice are already in user and nice.
    return { total: fields.slice(0, 8).reduce((a, b) => a + b, 0), steal: fields[7] ?? 0 };
  } catch {
    return undefined;
  }
}
/** The share of the machine's CPU time stolen since `before` (cpuTicks()), as text. */
const stolenText = (before) => {
  const after = cpuTicks();
  if (!before || !after || after.total === before.total) return 'CPU stolen by the host: unknown';
  return `CPU stolen by the host: ${((100 * (after.steal - before.steal)) / (after.total - before.total)).toFixed(0)}%`;
};
for (const name of selected) {
  if (interrupted()) break;
  const benchStarted = performance.now();
  const loadBefore = loadText();
  const ticksBefore = cpuTicks();
  const module = await BENCHES[name]();
  log(`\n## ${name}: ${module.description}`);
  try {
    await module.run();
    status[name] = 'ok';
  } catch (error) {
    status[name] = `failed: ${error?.message?.split('\n')[0] ?? error}`;
    console.error(`  ${name} FAILED: ${error?.stack ?? error}`);
  } finally {
    await runAllCleanups();
  }
  load[name] = `${loadBefore} before, ${loadText()} after; ${stolenText(ticksBefore)}`;
  log(`  (${name} took ${((performance.now() - benchStarted) / 1000).toFixed(0)} s; load average ${load[name]})`);
}

if (interrupted()) {
  await runAllCleanups();
  console.error('interrupted: no summary written');
  process.exit(130);
}

// ---- summary: this run's rows, plus the rows of benches not run now from the previous run
const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
let previous = { runs: {} };
try {
  previous = JSON.parse(readFileSync(LAST_RUN_JSON, 'utf8'));
} catch {
  // first run
}
const runs = { ...previous.runs };
for (const name of selected) {
  runs[name] = {
    at: now,
    commit,
    machine,
    status: status[name],
    load: load[name],
    rows: results.filter((row) => row.bench === name),
  };
}
const order = Object.keys(BENCHES).filter((name) => runs[name]);
const cell = (text) => String(text).replaceAll('|', '\\|');
const lines = ['| Bench | Figure | Value | Target | Met |', '| --- | --- | --- | --- | --- |'];
for (const name of order) {
  const run = runs[name];
  if (run.rows.length === 0) lines.push(`| ${name} | ${cell(run.status)} | | | |`);
  for (const row of run.rows) {
    const met = row.met === undefined ? '' : row.met ? 'yes' : '**no**';
    lines.push(`| ${name} | ${cell(row.figure)} | ${cell(row.display)} | ${cell(row.target)} | ${met} |`);
  }
}
const notes = order.map((name) => {
  const run = runs[name];
  const failed = run.status === 'ok' ? '' : ` — ${run.status}`;
  return `- ${name}: ${run.at}, commit ${run.commit}, ${run.machine}, load average (1/5/15 min) ${run.load}${failed}`;
});
const table = lines.join('\n');
const markdown = `${table}\n\nMeasured with \`npm run bench\` (figures are noisy when other work shares the 2 cores; the bench itself keeps about 2 busy, so a 1-minute load average well above that means other work ran too; on a virtual machine, CPU time stolen by the host for other guests slows every figure down, unevenly, and above a few per cent makes ratios near their targets unreliable):\n${notes.join('\n')}\n`;

log('\n## Summary\n');
log(markdown);
const took = `all benches took ${((performance.now() - started) / 1000).toFixed(0)} s`;
if (process.env.BENCH_SERVICE_NODE_ARGS) {
  // Profiled or otherwise instrumented runs are not representative: the last clean figures stay.
  log(`(BENCH_SERVICE_NODE_ARGS is set: ${PERFORMANCE_MD.replace(ROOT, '')} left as it was; ${took})`);
} else {
  const page = readFileSync(PERFORMANCE_MD, 'utf8');
  const begin = page.indexOf(TABLE_BEGIN);
  const end = page.indexOf(TABLE_END);
  if (begin < 0 || end < begin) throw new Error(`${PERFORMANCE_MD} has lost its ${TABLE_BEGIN} / ${TABLE_END} markers`);
  writeFileSync(PERFORMANCE_MD, `${page.slice(0, begin + TABLE_BEGIN.length)}\n${markdown}${page.slice(end)}`);
  writeFileSync(LAST_RUN_JSON, `${JSON.stringify({ runs }, null, 2)}\n`);
  log(`(written to ${PERFORMANCE_MD.replace(ROOT, '')}; ${took})`);
}
process.exit(Object.values(status).every((s) => s === 'ok') ? 0 : 1);
