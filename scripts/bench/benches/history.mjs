/**
 * history: the history endpoints on a big table. 1,000,000 rows for 10 users (100,000 each, interleaved in
 * time), seeded in SQL with generate_series: statuses ~80% complete / 12% error / 8% pending, generation
 * types ~40% fashion_swap_full and the rest spread over the other seven; then ANALYZE and VACUUM until the
 * visibility map covers the table (the state autovacuum reaches on its own on an insert-mostly table).
 *
 * 1. GET /user/generation-history page 1 and page 1000 (limit 20, offset 19,980) with no filter, a status
 *    filter, a generation_type filter and both: p50/p99 of 200 sequential requests each.
 * 2. GET /user/generation-history/{id} at 50 connections against a bare node:http + pg (Pool of 10) server
 *    running the same SELECT by id and user: 8 s rounds, alternating, twice each; the best round of each side
 *    gives req/s, the ratio and the service's p99. With BENCH_BEFORE, that revision's service is a third side.
 */
import pg from 'pg';
import {
  createBenchEnv,
  createUserWithKey,
  fmtMs,
  keepAliveAgent,
  log,
  alternateLoads,
  benchBefore,
  record,
  recordBefore,
  request,
  summarize,
} from '../lib.mjs';

const USERS = 10;
const ROWS_PER_USER = 100_000;
const SEED_CHUNK = 250_000;
const LIST_REQUESTS = 200;
const LIST_WARMUP = 10;
const LIST_MAX_MS = 40_000; // per variant: a bound in time as well as in count
const GET_CONNECTIONS = 50;
const GET_WARMUP_MS = 2_000;
const GET_DURATION_MS = 8_000;
const GET_ROUNDS = 2;

const TYPES = [
  ['fashion_swap_full', 'fashion_swap', 0.4],
  ['product_card', 'fashion_card', 0.5],
  ['upper', 'fashion_swap_half', 0.6],
  ['lower', 'fashion_swap_half', 0.7],
  ['lengerie_swap', 'lengerie', 0.77],
  ['furniture_placement', 'furniture', 0.85],
  ['fabric_retexture', 'fabric', 0.92],
  ['enhance', 'default', 1],
];

export const description = `history list (page 1 / page 1000, filters) and item GET on ${(USERS * ROWS_PER_USER).toLocaleString('en')} rows, ROLE=api`;

export async function run() {
  const env = await createBenchEnv();
  const db = new pg.Client({ connectionString: env.databaseUrl });
  const agent = keepAliveAgent(GET_CONNECTIONS);
  try {
    // The service migrates the fresh database; the seed goes in afterwards.
    const service = await env.startService({ ROLE: 'api' });
    await db.connect();
    const { authorization } = await createUserWithKey(env.databaseUrl, 'bench-history-00');
    const {
      rows: [{ id: userId }],
    } = await db.query(`SELECT id FROM users WHERE name = 'bench-history-00'`);
    await seed(db);

    // --- 1. list pages
    const variants = [
      ['no filter', ''],
      ['status=complete', '&status=complete'],
      ['generation_type=fashion_swap_full', '&generation_type=fashion_swap_full'],
      ['status + generation_type', '&status=complete&generation_type=fashion_swap_full'],
    ];
    for (const page of [1, 1000]) {
      for (const [label, query] of variants) {
        const url = `${service.baseUrl}/user/generation-history?page=${page}&limit=20${query}`;
        const times = [];
        let first;
        const started = performance.now();
        for (let i = 0; i < LIST_WARMUP + LIST_REQUESTS && performance.now() - started < LIST_MAX_MS; i++) {
          const response = await request(agent, { url, headers: { Authorization: authorization } });
          if (response.status !== 200) throw new Error(`GET ${url}: ${response.status} ${response.body}`);
          first ??= JSON.parse(response.body.toString());
          if (i >= LIST_WARMUP) times.push(response.ms);
        }
        const s = summarize(times);
        const limit = page === 1 ? 10 : 50;
        log(
          `  page ${String(page).padEnd(4)} ${label.padEnd(34)} p50 ${fmtMs(s.p50).padStart(9)} p99 ${fmtMs(s.p99).padStart(9)} ` +
            `(${s.n} requests; total ${first.total}, ${first.items.length} items)`,
        );
        record('history', `list page ${page}, ${label}: p50`, s.p50, `${fmtMs(s.p50)} (p99 ${fmtMs(s.p99)})`, {
          op: '<=',
          value: limit,
          text: `p50 <= ${limit} ms`,
        });
      }
    }

    // --- 2. item GET: service vs bare node:http + pg
    const { rows } = await db.query('SELECT id FROM history_items WHERE user_id = $1 ORDER BY random() LIMIT 1000', [
      userId,
    ]);
    const ids = rows.map((row) => row.id);
    const sequential = [];
    for (let i = 0; i < 200; i++) {
      const response = await request(agent, {
        url: `${service.baseUrl}/user/generation-history/${ids[i % ids.length]}`,
        headers: { Authorization: authorization },
      });
      if (response.status !== 200) throw new Error(`GET item: ${response.status} ${response.body}`);
      if (i >= 20) sequential.push(response.ms);
    }
    const one = summarize(sequential);
    log(`  item GET, 1 connection, sequential: p50 ${fmtMs(one.p50)} p99 ${fmtMs(one.p99)}`);

    const baseline = await env.startScript(new URL('../baselines/history-server.mjs', import.meta.url).pathname, {
      DATABASE_URL: env.databaseUrl,
      USER_ID: userId,
    });
    const check = await request(undefined, { url: `${baseline.baseUrl}/user/generation-history/${ids[0]}` });
    if (check.status !== 200) throw new Error(`baseline GET: ${check.status} ${check.body}`);
    const item = (server, headers = {}) => ({
      url: server.baseUrl,
      requests: ids.map((id) => ({ path: `/user/generation-history/${id}`, headers })),
    });
    const before = benchBefore();
    const serviceBefore = before && (await env.startService({ ROLE: 'api' }, { main: before.main }));
    const {
      service: serviceResult,
      baseline: baselineResult,
      before: beforeResult,
    } = await alternateLoads(
      {
        service: { target: item(service, { Authorization: authorization }), pid: service.pid },
        baseline: { target: item(baseline), pid: baseline.pid },
        ...(serviceBefore && {
          before: { target: item(serviceBefore, { Authorization: authorization }), pid: serviceBefore.pid },
        }),
      },
      { rounds: GET_ROUNDS, concurrency: GET_CONNECTIONS, durationMs: GET_DURATION_MS, warmupMs: GET_WARMUP_MS },
    );
    await service.stop();
    await serviceBefore?.stop();
    await baseline.stop();

    const ratio = serviceResult.rps / baselineResult.rps;
    record(
      'history',
      `item GET service req/s (c=${GET_CONNECTIONS}, best of ${GET_ROUNDS})`,
      serviceResult.rps,
      `${serviceResult.rps.toFixed(0)} req/s (p50 ${fmtMs(serviceResult.p50)})`,
    );
    record(
      'history',
      `item GET baseline node:http+pg req/s (c=${GET_CONNECTIONS}, best of ${GET_ROUNDS})`,
      baselineResult.rps,
      `${baselineResult.rps.toFixed(0)} req/s (p50 ${fmtMs(baselineResult.p50)}, p99 ${fmtMs(baselineResult.p99)})`,
    );
    record(
      'history',
      'item GET server CPU per request, service vs baseline (info)',
      serviceResult.cpuMsPerRequest,
      `${fmtMs(serviceResult.cpuMsPerRequest)} vs ${fmtMs(baselineResult.cpuMsPerRequest)}`,
    );
    record('history', 'item GET service / baseline', ratio, ratio.toFixed(2), { op: '>=', value: 0.5, text: '>= 0.5' });
    record('history', `item GET service p99 (c=${GET_CONNECTIONS})`, serviceResult.p99, fmtMs(serviceResult.p99), {
      op: '<=',
      value: 20,
      text: '<= 20 ms',
    });
    record('history', 'item GET service p99, 1 connection', one.p99, `${fmtMs(one.p99)} (p50 ${fmtMs(one.p50)})`);
    if (before) recordBefore('history', 'item GET', serviceResult, beforeResult, before.name);
  } finally {
    agent.destroy();
    await db.end().catch(() => {});
    await env.dispose();
  }
}

/**
 * Bulk load: the indexes and the primary key are set aside and rebuilt from their own definitions
 * (pg_get_indexdef / pg_get_constraintdef), which is much faster than maintaining six B-trees row by row,
 * and the seeding session skips the per-row foreign-key trigger (session_replication_role = replica; the
 * rows reference existing users by construction). The schema afterwards is what the migration made.
 */
export async function seed(db) {
  const started = performance.now();
  await db.query(`SET maintenance_work_mem = '256MB'`);
  await db.query('SET synchronous_commit = off');
  const { rows: indexes } = await db.query(
    `SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS definition
       FROM pg_index i
      WHERE i.indrelid = 'history_items'::regclass
        AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`,
  );
  const { rows: primaryKeys } = await db.query(
    `SELECT conname AS name, pg_get_constraintdef(oid) AS definition
       FROM pg_constraint WHERE conrelid = 'history_items'::regclass AND contype = 'p'`,
  );
  for (const { name } of indexes) await db.query(`DROP INDEX ${name}`);
  for (const { name } of primaryKeys) await db.query(`ALTER TABLE history_items DROP CONSTRAINT "${name}"`);
  await db.query('SET session_replication_role = replica');
  await db.query(
    `INSERT INTO users (id, name) SELECT gen_random_uuid(), 'bench-history-' || lpad(n::text, 2, '0') FROM generate_series(1, $1) n`,
    [USERS - 1],
  );
  const typeCase = TYPES.map(([type, , upTo]) => `WHEN r1 < ${upTo} THEN '${type}'`).join(' ');
  const toolValues = TYPES.map(([type, tool]) => `('${type}', '${tool}')`).join(', ');
  const inputs = JSON.stringify({
    clothes: { key: 'seed/clothes', format: 'jpeg', width: 1024, height: 1024, bytes: 181234 },
    person: { key: 'seed/person', format: 'jpeg', width: 1024, height: 1365, bytes: 242311 },
  });
  const total = USERS * ROWS_PER_USER;
  for (let from = 0; from < total; from += SEED_CHUNK) {
    const to = Math.min(total, from + SEED_CHUNK) - 1;
    await db.query(
      `WITH u AS (SELECT array_agg(id ORDER BY name) AS ids FROM users WHERE name LIKE 'bench-history-%'),
            types(generation_type, tool) AS (VALUES ${toolValues}),
            base AS (
              SELECT g, now() - g * interval '30 seconds' AS ts, r3,
                     CASE ${typeCase} END AS generation_type,
                     CASE WHEN r2 < 0.80 THEN 'complete' WHEN r2 < 0.92 THEN 'error' ELSE 'pending' END AS status
                FROM (SELECT g, random() AS r1, random() AS r2, random() AS r3 FROM generate_series($1::int, $2::int) g) x
            )
       INSERT INTO history_items (id, user_id, tool, generation_type, status, inputs, texts, "like",
                                  error_code, error_message, created_at, updated_at, completed_at)
       SELECT gen_random_uuid(), u.ids[1 + b.g % ${USERS}], t.tool, b.generation_type, b.status, $3::jsonb, '{}'::jsonb,
              CASE WHEN b.status = 'complete' AND b.r3 < 0.1 THEN true WHEN b.status = 'complete' AND b.r3 < 0.15 THEN false END,
              CASE WHEN b.status = 'error' THEN 'engine_failed' END,
              CASE WHEN b.status = 'error' THEN 'The engine failed 3 times.' END,
              b.ts, b.ts + interval '5 seconds', CASE WHEN b.status = 'complete' THEN b.ts + interval '5 seconds' END
         FROM base b JOIN types t USING (generation_type) CROSS JOIN u`,
      [from, to, inputs],
    );
  }
  const inserted = performance.now();
  await db.query('SET session_replication_role = DEFAULT');
  // The replica role also skipped the trigger that keeps history_counts; count the seeded rows once instead.
  await db.query(
    `INSERT INTO history_counts (user_id, status, generation_type, count)
     SELECT user_id, status, generation_type, count(*) FROM history_items GROUP BY 1, 2, 3
     ON CONFLICT (user_id, status, generation_type) DO UPDATE SET count = EXCLUDED.count`,
  );
  for (const { name, definition } of primaryKeys) {
    await db.query(`ALTER TABLE history_items ADD CONSTRAINT "${name}" ${definition}`);
  }
  for (const { definition } of indexes) await db.query(definition);
  const indexed = performance.now();
  await db.query('ANALYZE history_items');
  // Until the visibility map covers the table, as autovacuum leaves an insert-mostly table: index-only scans
  // then skip the heap. Here one VACUUM right after the bulk load marks only part of it all-visible.
  let vacuums = 0;
  for (let allVisible = 0; allVisible < 0.99 && vacuums < 6; vacuums++) {
    await db.query('VACUUM history_items');
    const {
      rows: [table],
    } = await db.query(`SELECT relpages, relallvisible FROM pg_class WHERE relname = 'history_items'`);
    allVisible = table.relallvisible / Math.max(1, table.relpages);
  }
  const { rows } = await db.query(
    `SELECT count(*)::int AS n, pg_size_pretty(pg_total_relation_size('history_items')) AS size FROM history_items`,
  );
  log(
    `  seeded ${rows[0].n.toLocaleString('en')} rows (${rows[0].size} with indexes) in ${((inserted - started) / 1000).toFixed(1)} s, ` +
      `primary key and ${indexes.length} indexes rebuilt in ${((indexed - inserted) / 1000).toFixed(1)} s, ` +
      `ANALYZE and ${vacuums} VACUUM ${((performance.now() - indexed) / 1000).toFixed(1)} s`,
  );
}
