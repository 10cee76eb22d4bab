/**
 * retention: a job stream while the retention sweep removes a backlog. ROLE=all with the default worker concurrency,
 * HISTORY_RETENTION=1h and RETENTION_SWEEP_INTERVAL_MS=1000 (the sweep looks every second). One client submits a
 * fashion_card job (512x512) every 250 ms (open loop) and polls each job every 20 ms; latency = from the start of
 * the POST to the first GET that answers `complete`.
 *
 * 1. Baseline: the stream for 15 s with nothing to remove (retention on, the sweep finding nothing each second).
 * 2. 100,000 final items that ended two days ago are inserted in SQL (10 users, the stream's among them; 85%
 *    complete with a result folder of two small files each, written beforehand, 15% error); the sweep starts on
 *    them within a second. The stream runs until the sweep has removed them all (at most 240 s); only the jobs
 *    submitted while expired items remained count.
 * 3. Baseline again for 15 s, so that drift over the run does not count as the sweep's doing.
 *
 * The ratio is the loaded p50 over the p50 of both baselines' jobs together.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import {
  createBenchEnv,
  createUserWithKey,
  fmtMs,
  keepAliveAgent,
  log,
  makePhoto,
  multipartBody,
  NO_LIMITS,
  postJob,
  record,
  requestJson,
  sleep,
  summarize,
} from '../lib.mjs';

const INTERVAL_MS = 250;
const BASELINE_MS = 15_000;
const LOADED_MAX_MS = 240_000;
const POLL_MS = 20;
const JOB_TIMEOUT_MS = 30_000;
const WARMUP_PAIRS = 6;
const SIDE = 512;
const EXPIRED = 100_000;
const USERS = 10;
const FILE_WRITES_AT_ONCE = 32;

export const description = `submit-to-complete p50, one fashion_card job every ${INTERVAL_MS} ms, while the retention sweep removes ${EXPIRED.toLocaleString('en')} expired items vs nothing to remove, ROLE=all`;

export async function run() {
  const clothes = await makePhoto('clothes', SIDE, SIDE);
  const form = multipartBody({ tool: 'fashion_card', clothes: { data: clothes, filename: 'clothes.jpg' } });
  const env = await createBenchEnv('retention');
  const agent = keepAliveAgent(64);
  const db = new pg.Client({ connectionString: env.databaseUrl });
  try {
    const service = await env.startService({
      ROLE: 'all',
      ...NO_LIMITS,
      HISTORY_RETENTION: '1h',
      RETENTION_SWEEP_INTERVAL_MS: '1000',
    });
    await db.connect();
    // The stream's user is one of the users whose expired items are seeded.
    const { authorization } = await createUserWithKey(env.databaseUrl, 'bench-retention-0');

    const submit = async () => {
      const started = performance.now();
      const post = await postJob(agent, service.baseUrl, authorization, form);
      if (post.status !== 202) return { started, error: `POST ${post.status}` };
      const id = post.json.history_item_id;
      while (performance.now() - started < JOB_TIMEOUT_MS) {
        const got = await requestJson(agent, {
          url: `${service.baseUrl}/user/generation-history/${id}`,
          headers: { Authorization: authorization },
        });
        if (got.status === 200 && got.json.status === 'complete') return { started, ms: performance.now() - started };
        if (got.status !== 200 || got.json.status === 'error') {
          return { started, error: `GET ${got.status} ${got.json?.status}` };
        }
        await sleep(POLL_MS);
      }
      return { started, error: 'timeout' };
    };

    /** Submits a job every INTERVAL_MS until `until()` says stop; resolves every job's outcome. */
    const stream = async (until) => {
      const jobs = [];
      const t0 = performance.now();
      for (let i = 0; !until(performance.now() - t0); i++) {
        const wait = t0 + i * INTERVAL_MS - performance.now();
        if (wait > 0) await sleep(wait);
        jobs.push(submit());
      }
      return Promise.all(jobs);
    };

    const describeStream = (label, outcomes) => {
      const done = outcomes.filter((o) => o.ms !== undefined);
      const failed = outcomes.filter((o) => o.error);
      const s = summarize(done.map((o) => o.ms));
      log(
        `  ${label}: ${done.length}/${outcomes.length} jobs complete; p50 ${fmtMs(s.p50)} p90 ${fmtMs(s.p90)} p99 ${fmtMs(s.p99)} max ${fmtMs(s.max)}` +
          (failed.length > 0 ? `; failed: ${countsOf(failed.map((o) => o.error))}` : ''),
      );
      return outcomes;
    };

    for (let i = 0; i < WARMUP_PAIRS; i++) await Promise.all([submit(), submit()]);

    const seed = await writeResultFolders(env);
    const before = describeStream('baseline (nothing to remove)', await stream((elapsed) => elapsed >= BASELINE_MS));

    await drained(db);
    const seeded = performance.now();
    await insertExpired(db, seed);
    log(
      `  ${EXPIRED.toLocaleString('en')} expired items inserted in ${((performance.now() - seeded) / 1000).toFixed(1)} s`,
    );
    const sweep = followSweep(db);
    const during = await stream((elapsed) => sweep.finishedAt !== undefined || elapsed >= LOADED_MAX_MS);
    await sweep.stop();
    const swept = during.filter((o) => sweep.finishedAt === undefined || o.started < sweep.finishedAt);
    const loaded = describeStream('while the sweep removed items', swept);
    const seconds = ((sweep.finishedAt ?? performance.now()) - sweep.startedAt) / 1000;
    log(
      `  the sweep removed ${(EXPIRED - sweep.remaining).toLocaleString('en')} items in ${seconds.toFixed(1)} s` +
        (sweep.remaining > 0 ? ` (${sweep.remaining.toLocaleString('en')} left when the stream stopped)` : ''),
    );

    await drained(db);
    const after = describeStream('baseline again', await stream((elapsed) => elapsed >= BASELINE_MS));

    const completed = (outcomes) => outcomes.filter((o) => o.ms !== undefined).map((o) => o.ms);
    const baseline = summarize([...completed(before), ...completed(after)]);
    const withSweep = summarize(completed(loaded));
    // A stream the machine could not keep up with measures its backlog, not the sweep: no ratio then.
    const keptUp = [before, loaded, after].every((phase) => phase.every((o) => o.ms !== undefined));
    const ratio = keptUp ? withSweep.p50 / baseline.p50 : Number.NaN;
    record(
      'retention',
      'submit-to-complete p50, nothing to remove (fashion_card 512 px, 4 jobs/s)',
      baseline.p50,
      fmtMs(baseline.p50),
    );
    record(
      'retention',
      `submit-to-complete p50 while removing ${EXPIRED.toLocaleString('en')} expired items`,
      withSweep.p50,
      fmtMs(withSweep.p50),
    );
    const ratioText = keptUp ? `x${ratio.toFixed(2)}` : 'n/a: jobs timed out, the stream did not keep up';
    record('retention', 'p50 while removing / p50 with nothing to remove', ratio, ratioText, {
      op: '<=',
      value: 1.2,
      text: '<= x1.20',
    });
    record(
      'retention',
      'items removed per second (local storage, one worker)',
      (EXPIRED - sweep.remaining) / seconds,
      `${Math.round((EXPIRED - sweep.remaining) / seconds)}/s`,
    );
    await service.stop();
  } finally {
    agent.destroy();
    await db.end().catch(() => {});
    await env.dispose();
  }
}

/**
 * Writes the result folders of the complete items to be seeded (a stock and a preview file each) under the media
 * root, before the first baseline, so that every phase runs on the same disk. Resolves the items' ids (the complete
 * ones first) and how many are complete.
 */
async function writeResultFolders(env) {
  const started = performance.now();
  const ids = Array.from({ length: EXPIRED }, () => randomUUID());
  const complete = Math.round(EXPIRED * 0.85);
  const mediaRoot = env.serviceEnv.MEDIA_ROOT;
  for (let start = 0; start < complete; start += FILE_WRITES_AT_ONCE) {
    await Promise.all(
      ids.slice(start, Math.min(complete, start + FILE_WRITES_AT_ONCE)).map(async (id) => {
        await mkdir(join(mediaRoot, id), { recursive: true });
        await Promise.all([
          writeFile(join(mediaRoot, id, 'stock.jpg'), 'stock'),
          writeFile(join(mediaRoot, id, 'preview.webp'), 'preview'),
        ]);
      }),
    );
  }
  log(
    `  ${complete.toLocaleString('en')} result folders written in ${((performance.now() - started) / 1000).toFixed(1)} s`,
  );
  return { ids, complete };
}

/**
 * The items, spread over the stream's user and USERS - 1 more, ended two days ago (one second apart), the first
 * `complete` of them complete.
 */
async function insertExpired(db, { ids, complete }) {
  await db.query(
    `INSERT INTO users (id, name) SELECT gen_random_uuid(), 'bench-retention-' || n FROM generate_series(1, $1) n`,
    [USERS - 1],
  );
  await db.query(
    `WITH u AS (SELECT array_agg(id ORDER BY id) AS ids
                  FROM users WHERE name LIKE 'bench-retention-%')
     INSERT INTO history_items (id, user_id, tool, generation_type, status, inputs, error_code, error_message,
                                created_at, updated_at, completed_at)
     SELECT t.id, u.ids[1 + (t.n % ${USERS})], 'fashion_card', 'product_card',
            CASE WHEN t.n <= $2 THEN 'complete' ELSE 'error' END, '{}'::jsonb,
            CASE WHEN t.n > $2 THEN 'engine_failed' END, CASE WHEN t.n > $2 THEN 'The engine failed.' END,
            now() - interval '2 days' - t.n * interval '1 second', now() - interval '2 days' - t.n * interval '1 second',
            now() - interval '2 days' - t.n * interval '1 second'
       FROM unnest($1::uuid[]) WITH ORDINALITY AS t(id, n) CROSS JOIN u`,
    [ids, complete],
  );
}

/** Counts the expired items left every 500 ms; `finishedAt` is set once there are none. */
function followSweep(db) {
  const state = { startedAt: performance.now(), finishedAt: undefined, remaining: EXPIRED, stop: undefined };
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const { rows } = await db.query(
        `SELECT count(*)::int AS n FROM history_items WHERE status <> 'pending' AND completed_at < now() - interval '1 hour'`,
      );
      state.remaining = rows[0].n;
      if (state.remaining === 0) {
        state.finishedAt = performance.now();
        return;
      }
      await sleep(500);
    }
  })();
  state.stop = async () => {
    stopped = true;
    await loop;
  };
  return state;
}

/** `timeout x3, POST 503 x1`. */
function countsOf(texts) {
  const counts = new Map();
  for (const text of texts) counts.set(text, (counts.get(text) ?? 0) + 1);
  return [...counts].map(([text, count]) => `${text} x${count}`).join(', ');
}

/** Waits (at most a minute) until no job is pending, so that a phase does not inherit the last one's backlog. */
async function drained(db) {
  const deadline = performance.now() + 60_000;
  while (performance.now() < deadline) {
    const { rows } = await db.query(`SELECT count(*)::int AS n FROM history_items WHERE status = 'pending'`);
    if (rows[0].n === 0) return;
    await sleep(250);
  }
  log('  (jobs still pending after a minute: the next phase starts with a backlog)');
}
