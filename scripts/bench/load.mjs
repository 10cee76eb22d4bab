#!/usr/bin/env node
/**
 * load: the API and a worker under a mixed load for 60 s (LOAD_SECONDS), as two processes (one ROLE=api, one ROLE=worker, so
 * the API's memory is measured apart from the engine's). 200 pollers (keep-alive) each GET an item or the list in
 * turn, with a short pause; 20 submitters each POST a `default` job (one 128x128 JPEG) in a loop, with a pause.
 * Limits are raised so that none triggers. Afterwards every accepted job must end `complete` within the drain
 * period.
 *
 * Correctness: zero errors (only 200 and 202; no 5xx, no other status, no connection error) and zero lost jobs
 * (every 202 is a row that ends `complete`). Figures: p50/p90/p99/max of polls and submits, throughput, and the
 * API's RSS after the warm-up and at the end (flat when within 20%: printed as met / not met, never asserted).
 *
 * `npm run bench:load` (builds first) or `node scripts/bench/load.mjs` after `npm run build`; also
 * `node scripts/bench/index.mjs load`. Standalone, it exits 1 when there were errors or lost jobs.
 */
import { existsSync } from 'node:fs';
import http from 'node:http';
import { loadavg } from 'node:os';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import {
  cpuMs,
  createBenchEnv,
  createUserWithKey,
  DIST,
  fmtMb,
  fmtMs,
  log,
  makePhoto,
  multipartBody,
  record,
  requestJson,
  rssKb,
  runAllCleanups,
  sampleRss,
  sleep,
  summarize,
} from './lib.mjs';

const POLLERS = 200;
const SUBMITTERS = 20;
/** LOAD_SECONDS (10..3600) runs it longer, e.g. to see whether the API's memory levels off. */
const DURATION_MS = loadSeconds() * 1000;
const WARMUP_MS = 10_000;
/** A poller's pause between two answers: an eager client, far more often than the README's 2 s, 4 s, 8 s... */
const POLL_PAUSE_MS = 200;
/** A submitter's pause between two answers. */
const SUBMIT_PAUSE_MS = 250;
const DRAIN_MS = 120_000;
const SIDE = 128;
/** Upper bounds on top of the time limit, so no loop can run away. */
const MAX_POLLS = 2_000_000;
const MAX_SUBMITS = 200_000;
const REQUEST_TIMEOUT_MS = 30_000;
const RSS_GROWTH_LIMIT = 1.2;

export const description =
  `${POLLERS} pollers (GET item / list) + ${SUBMITTERS} submitters (default tool, ${SIDE}x${SIDE}) for ` +
  `${DURATION_MS / 1000} s, ROLE=api + ROLE=worker: errors, lost jobs, latency, API RSS`;

/** Runs the bench; resolves with whether the correctness criteria (no errors, no lost jobs) held. */
export async function run() {
  const image = await makePhoto('person', SIDE, SIDE);
  const form = multipartBody({ tool: 'default', image: { data: image, filename: 'image.jpg' } });
  const env = await createBenchEnv();
  const db = new pg.Client({ connectionString: env.databaseUrl });
  const pollAgent = keepAliveAgentWithIdleTimeout(POLLERS);
  const submitAgent = keepAliveAgentWithIdleTimeout(SUBMITTERS);
  try {
    const noLimits = {
      LIMIT_MAX_PENDING: '1000000',
      LIMIT_CREATIONS_PER_MINUTE: '1000000',
      LIMIT_CONCURRENT_UPLOADS: '1000000',
      LIMIT_EVENT_STREAMS: '1000000',
      LIMIT_HELD_REQUESTS: '1000000',
    };
    const [api, worker] = await Promise.all([
      env.startService({ ROLE: 'api', ...noLimits }),
      env.startService({ ROLE: 'worker', ...noLimits }),
    ]);
    await db.connect();
    // One user per submitter; pollers are spread over the same users and read their own items.
    const users = [];
    for (let i = 0; i < SUBMITTERS; i++) users.push((await createUserWithKey(env.databaseUrl)).authorization);
    log(`  API pid ${api.pid} (RSS ${fmtMb(rssKb(api.pid))} idle), worker pid ${worker.pid}; ${users.length} users`);

    const errors = {};
    const countError = (what) => (errors[what] = (errors[what] ?? 0) + 1);
    /** Accepted jobs, newest last: [{ id, authorization }]. */
    const accepted = [];
    const polls = { item: [], list: [] };
    const submits = [];
    let sentPolls = 0;
    let sentSubmits = 0;

    const started = performance.now();
    const end = started + DURATION_MS;
    const rss = sampleRss(api.pid, 250);
    const apiCpuBefore = cpuMs(api.pid);
    const workerCpuBefore = cpuMs(worker.pid);
    const ownCpuBefore = process.cpuUsage();
    const loadBefore = loadavg()[0];

    const submitter = async (index) => {
      const authorization = users[index];
      while (performance.now() < end && sentSubmits < MAX_SUBMITS) {
        sentSubmits++;
        try {
          const answer = await requestJson(submitAgent, {
            url: `${api.baseUrl}/generation/generate_image_v2/`,
            method: 'POST',
            headers: { Authorization: authorization, 'Content-Type': form.contentType },
            body: form.body,
            timeoutMs: REQUEST_TIMEOUT_MS,
          });
          if (answer.status === 202) {
            submits.push(answer.ms);
            accepted.push({ id: answer.json.history_item_id, authorization });
          } else countError(`POST ${answer.status}`);
        } catch (error) {
          countError(`POST ${error?.code ?? error?.message ?? error}`);
        }
        await sleep(SUBMIT_PAUSE_MS);
      }
    };

    const poller = async (index) => {
      const authorization = users[index % users.length];
      for (let turn = index; performance.now() < end && sentPolls < MAX_POLLS; turn++) {
        sentPolls++;
        // Every other request reads one item, a recent one of this user's when there is one.
        const mine = turn % 2 === 0 ? newestOf(accepted, authorization, turn) : undefined;
        const kind = mine ? 'item' : 'list';
        const path = mine ? `/user/generation-history/${mine.id}` : `/user/generation-history?limit=20`;
        try {
          const answer = await requestJson(pollAgent, {
            url: `${api.baseUrl}${path}`,
            headers: { Authorization: authorization },
            timeoutMs: REQUEST_TIMEOUT_MS,
          });
          if (answer.status === 200) polls[kind].push(answer.ms);
          else countError(`GET ${kind} ${answer.status}`);
        } catch (error) {
          countError(`GET ${kind} ${error?.code ?? error?.message ?? error}`);
        }
        await sleep(POLL_PAUSE_MS);
      }
    };

    await Promise.all([
      ...Array.from({ length: SUBMITTERS }, (_, i) => submitter(i)),
      ...Array.from({ length: POLLERS }, (_, i) => poller(i)),
    ]);
    const seconds = (performance.now() - started) / 1000;
    const apiCpu = cpuMs(api.pid) - apiCpuBefore;
    const workerCpu = cpuMs(worker.pid) - workerCpuBefore;
    const ownCpuUsage = process.cpuUsage(ownCpuBefore);
    const ownCpu = (ownCpuUsage.user + ownCpuUsage.system) / 1000;
    const loadAfter = loadavg()[0];
    const samples = rss.stop();
    // Medians over 2 s, so that one sample taken just before or after a garbage collection does not decide.
    const warmRssKb = medianKb(samples.filter((s) => Math.abs(s.t - WARMUP_MS) <= 1000));
    const endRssKb = medianKb(samples.filter((s) => s.t >= seconds * 1000 - 2000));

    // Drain: every accepted job must end complete, with nobody submitting any more.
    const drainStarted = performance.now();
    const ids = accepted.map((job) => job.id);
    let byStatus = {};
    while (performance.now() - drainStarted < DRAIN_MS) {
      byStatus = await countByStatus(db, ids);
      if (!byStatus.pending) break;
      await sleep(500);
    }
    const drainSeconds = (performance.now() - drainStarted) / 1000;
    const { rows: allRows } = await db.query('SELECT count(*)::int AS n FROM history_items');
    const lost = ids.length - (byStatus.complete ?? 0);

    // ---- report
    const errorCount = Object.values(errors).reduce((sum, n) => sum + n, 0);
    const allPolls = [...polls.item, ...polls.list];
    const pollStats = summarize(allPolls);
    const submitStats = summarize(submits);
    const line = (s) => `p50 ${fmtMs(s.p50)}, p90 ${fmtMs(s.p90)}, p99 ${fmtMs(s.p99)}, max ${fmtMs(s.max)}`;
    const perSecond = (n, digits = 0) => `${(n / seconds).toFixed(digits)}/s`;
    const percent = (ms) => `${(ms / seconds / 10).toFixed(0)}%`;
    log(`  ${seconds.toFixed(1)} s of load; ${sentPolls} polls and ${sentSubmits} submits sent`);
    log(`  polls:   ${allPolls.length} answered 200, ${perSecond(allPolls.length)}; ${line(pollStats)}`);
    log(`    item:  ${polls.item.length}; ${line(summarize(polls.item))}`);
    log(`    list:  ${polls.list.length}; ${line(summarize(polls.list))}`);
    log(`  submits: ${submits.length} answered 202, ${perSecond(submits.length, 1)}; ${line(submitStats)}`);
    log(`  errors:  ${errorCount}${errorCount ? ` ${JSON.stringify(errors)}` : ''}`);
    log(
      `  drain:   ${drainSeconds.toFixed(1)} s after the load; items ${JSON.stringify(byStatus)}; ` +
        `rows in the database ${allRows[0].n} (202s: ${ids.length}); lost ${lost}`,
    );
    const apiCpuPerRequest = (apiCpu / (allPolls.length + submits.length)).toFixed(2);
    log(
      `  CPU (of one core): API ${percent(apiCpu)} (${apiCpuPerRequest} ms a request), worker ${percent(workerCpu)}, ` +
        `this load generator ${percent(ownCpu)}; 1-min load average ${loadBefore.toFixed(1)} before, ` +
        `${loadAfter.toFixed(1)} after (2 cores: above 2, the figures are CPU-bound)`,
    );
    const curve = [];
    for (let t = 0; t <= DURATION_MS; t += DURATION_MS > 60_000 ? 30_000 : 10_000) {
      const near = samples.filter((sample) => Math.abs(sample.t - t) <= 1000);
      if (near.length > 0) curve.push(`${t / 1000} s ${fmtMb(medianKb(near))}`);
    }
    log(`  API RSS over the run: ${curve.join(', ')}`);
    const peakKb = Math.max(...samples.map((sample) => sample.kb));
    const growth = endRssKb / warmRssKb;
    log(
      `  API RSS (medians over 2 s): ${fmtMb(warmRssKb)} after the ${WARMUP_MS / 1000} s warm-up, ` +
        `${fmtMb(endRssKb)} at the end (x${growth.toFixed(2)}), peak ${fmtMb(peakKb)}: ` +
        `flat within 20% ${growth <= RSS_GROWTH_LIMIT ? 'met' : 'NOT met'}`,
    );

    const none = { op: '<=', value: 0, text: '0' };
    record('load', 'errors (non-2xx or connection errors)', errorCount, `${errorCount}`, none);
    const drained = `${lost} of ${ids.length} (drained in ${drainSeconds.toFixed(1)} s)`;
    record('load', 'lost jobs (202 not complete after drain)', lost, drained, none);
    const figures = (stats, count, digits) =>
      `${fmtMs(stats.p50)} / ${fmtMs(stats.p99)} / ${fmtMs(stats.max)} (${perSecond(count, digits)})`;
    record('load', `polls (${POLLERS} clients) p50 / p99 / max`, pollStats.p99, figures(pollStats, allPolls.length, 0));
    const submitFigures = figures(submitStats, submits.length, 1);
    record('load', `submits (${SUBMITTERS} clients) p50 / p99 / max`, submitStats.p99, submitFigures);
    const rssFigure = `${fmtMb(endRssKb)} / ${fmtMb(warmRssKb)} = x${growth.toFixed(2)}`;
    record('load', 'API RSS end / after warm-up', growth, rssFigure, {
      op: '<=',
      value: RSS_GROWTH_LIMIT,
      text: `<= x${RSS_GROWTH_LIMIT}`,
    });
    await Promise.all([api.stop(), worker.stop()]);
    return errorCount === 0 && lost === 0;
  } finally {
    pollAgent.destroy();
    submitAgent.destroy();
    await db.end().catch(() => {});
    await env.dispose();
  }
}

/**
 * Not lib's keepAliveAgent: Node's agent drops an idle socket before the server does (at the server's
 * `Keep-Alive: timeout=5` hint less 1 s) only when the agent has a timeout of its own. Without one, a socket left
 * idle for 5 s is closed by the server just as the agent hands it to the next request, which fails with ECONNRESET
 * (seen here: 6 of 21,667 polls), a race of the client's, not an error of the service.
 */
function keepAliveAgentWithIdleTimeout(maxSockets) {
  return new http.Agent({ keepAlive: true, maxSockets, maxFreeSockets: maxSockets, timeout: REQUEST_TIMEOUT_MS });
}

/** A recent item of the user's, varying with `turn`, so polls spread over the items that are still changing. */
function newestOf(accepted, authorization, turn) {
  for (let i = accepted.length - 1 - (turn % 7), seen = 0; i >= 0 && seen < 400; i--, seen++) {
    if (accepted[i].authorization === authorization) return accepted[i];
  }
  return undefined;
}

function loadSeconds() {
  const seconds = Number(process.env.LOAD_SECONDS ?? 60);
  if (!Number.isInteger(seconds) || seconds < 10 || seconds > 3600) {
    throw new Error(`LOAD_SECONDS must be a whole number from 10 to 3600, got ${process.env.LOAD_SECONDS}`);
  }
  return seconds;
}

function medianKb(samples) {
  return summarize(samples.map((s) => s.kb)).p50;
}

async function countByStatus(db, ids) {
  const { rows } = await db.query(
    'SELECT status, count(*)::int AS n FROM history_items WHERE id = ANY($1::uuid[]) GROUP BY status',
    [ids],
  );
  return Object.fromEntries(rows.map((row) => [row.status, row.n]));
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  if (!existsSync(`${DIST}/main.js`)) {
    console.error('dist/main.js is missing: run `npm run build` first (`npm run bench:load` builds).');
    process.exit(2);
  }
  log(`# load: ${description}`);
  let ok = false;
  try {
    ok = await run();
  } catch (error) {
    console.error(`load FAILED: ${error?.stack ?? error}`);
  } finally {
    await runAllCleanups();
  }
  process.exit(ok ? 0 : 1);
}
