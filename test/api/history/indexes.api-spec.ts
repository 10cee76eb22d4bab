import type pg from 'pg';
import { CATALOG } from '../../../src/catalog/catalog.js';
import type { SqlStatement } from '../../../src/database/data-source.js';
import { type HistoryQuery, historyListStatements } from '../../../src/jobs/history.repository.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { connect, userIdOf } from '../../support/history.js';
import { Client } from '../../support/client.js';

const ROWS = 50_000;
/** Every tenth row is the heavy user's: 5,000 items; the rest belong to 199 other users. */
const HEAVY_EVERY = 10;
const OTHER_USERS = 199;
const LIMIT = 20;

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Index Cond'?: string;
  'Scan Direction'?: string;
  'Relation Name'?: string;
  Filter?: string;
  Plans?: PlanNode[];
}

function flatten(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(flatten)];
}

/** The filter combinations of the list and the index each one is to be answered from. */
const FILTERS: {
  name: string;
  filter: Pick<HistoryQuery, 'status' | 'generationType'>;
  index: string;
  columns: string[];
}[] = [
  { name: 'no filter', filter: {}, index: 'history_items_user_created', columns: ['user_id'] },
  {
    name: 'status',
    filter: { status: 'complete' },
    index: 'history_items_user_status_created',
    columns: ['user_id', 'status'],
  },
  {
    name: 'generation_type',
    filter: { generationType: 'upper' },
    index: 'history_items_user_type_created',
    columns: ['user_id', 'generation_type'],
  },
  {
    name: 'status and generation_type',
    filter: { status: 'error', generationType: 'upper' },
    index: 'history_items_user_status_type_created',
    columns: ['user_id', 'status', 'generation_type'],
  },
];

const USER_INDEXES = FILTERS.map((f) => f.index);

describe('the indexes behind GET /user/generation-history', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let db: pg.Client;
  let heavy: Client;
  let heavyId: string;

  async function explain(statement: SqlStatement): Promise<PlanNode[]> {
    const { rows } = await db.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
      `EXPLAIN (FORMAT JSON) ${statement.text}`,
      statement.values,
    );
    return flatten(rows[0]['QUERY PLAN'][0].Plan);
  }

  /** The index scans of a plan that read history_items through one of the list's indexes. */
  function listIndexScans(nodes: PlanNode[]): PlanNode[] {
    return nodes.filter((node) => node['Index Name'] !== undefined && USER_INDEXES.includes(node['Index Name']));
  }

  beforeAll(async () => {
    env = await createTestEnvironment();
    // The service creates the schema; without a worker nothing but the test touches the rows.
    sut = await startService({ ...env.serviceEnv, ROLE: 'api' });
    db = await connect(env.databaseUrl);
    const key = await createUserWithKey(env.databaseUrl);
    heavy = new Client(sut.baseUrl, key);
    heavyId = await userIdOf(db, key);

    const types = CATALOG.flatMap((tool) => tool.generationTypes.map((type) => type.id));
    const tools = CATALOG.flatMap((tool) => tool.generationTypes.map(() => tool.id));
    await db.query(
      `INSERT INTO users (id, name)
       SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(u), 12, '0'))::uuid, 'seeded-' || u
         FROM generate_series(1, $1::int) AS u`,
      [OTHER_USERS],
    );
    // Rows arrive in time order, as they would in service; users, statuses and types are interleaved.
    await db.query(
      `INSERT INTO history_items
              (id, user_id, tool, generation_type, status, inputs, error_code, error_message,
               created_at, updated_at, completed_at)
       SELECT gen_random_uuid(), owner, ($3::text[])[t], ($2::text[])[t], status, '{}',
              CASE WHEN status = 'error' THEN 'engine_failed' END,
              CASE WHEN status = 'error' THEN 'The engine failed 3 times.' END,
              at, at, CASE WHEN status <> 'pending' THEN at + interval '9 seconds' END
         FROM generate_series(1, $4::int) AS n,
              LATERAL (SELECT
                CASE WHEN n % $5::int = 0 THEN $1::uuid
                     ELSE ('00000000-0000-4000-8000-' || lpad(to_hex(1 + (n * 7919) % $6::int), 12, '0'))::uuid
                END AS owner,
                1 + (n + n / $5::int) % cardinality($2::text[]) AS t,
                (ARRAY['complete', 'complete', 'complete', 'complete', 'complete', 'complete', 'complete',
                       'error', 'error', 'pending'])[1 + (n * 13 + n / 7) % 10] AS status,
                -- A few rows share their instant with the row before, as concurrent jobs do.
                timestamptz '2025-01-01T00:00:00Z' + (n - n % 3 / 2) * interval '37 seconds' AS at
              ) AS row`,
      [heavyId, types, tools, ROWS, HEAVY_EVERY, OTHER_USERS],
    );
    // What autovacuum does to a table that lives in service: statistics and the visibility map, without
    // which no plan can count on reading the index alone.
    await db.query('VACUUM (ANALYZE) history_items');
    await db.query('VACUUM (ANALYZE) history_counts');
  }, 120_000);

  afterAll(async () => {
    await db?.end();
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  it('is run on a table of many users with one heavy user', async () => {
    const { rows } = await db.query<{ users: number; rows: number; heavy: number }>(
      `SELECT count(DISTINCT user_id)::int AS users, count(*)::int AS rows,
              count(*) FILTER (WHERE user_id = $1)::int AS heavy
         FROM history_items`,
      [heavyId],
    );
    expect(rows[0]).toEqual({ users: OTHER_USERS + 1, rows: ROWS, heavy: ROWS / HEAVY_EVERY });
    for (const { filter } of FILTERS) {
      const { count } = historyListStatements(heavyId, { page: 1, limit: LIMIT, ...filter });
      const [{ total }] = (await db.query<{ total: number }>(count.text, count.values)).rows;
      // Enough rows under every filter that the planner has a real choice to make.
      expect(total).toBeGreaterThan(100);
    }
  });

  describe.each(FILTERS)('filtered by $name, on $index', ({ filter, index, columns }) => {
    it.each([
      [1, 0],
      [1000, 19_980],
    ])(
      'finds page %i (OFFSET %i) by walking the index backwards, without a Sort or a Seq Scan',
      async (page, offset) => {
        const { page: statement } = historyListStatements(heavyId, { page, limit: LIMIT, ...filter });
        expect(statement.text).toMatch(/ORDER BY created_at DESC, id DESC\s+LIMIT \$\d+ OFFSET \$\d+/);
        expect(statement.values.slice(-2)).toEqual([LIMIT, offset]);

        const nodes = await explain(statement);

        expect(nodes.filter((node) => node['Node Type'] === 'Seq Scan')).toEqual([]);
        expect(nodes.filter((node) => /Sort/.test(node['Node Type']))).toEqual([]);
        expect(nodes.filter((node) => node['Node Type'].startsWith('Bitmap'))).toEqual([]);
        const scans = listIndexScans(nodes);
        expect(scans).toHaveLength(1);
        const [scan] = scans;
        expect(['Index Scan', 'Index Only Scan']).toContain(scan['Node Type']);
        expect(scan['Index Name']).toBe(index);
        expect(scan['Scan Direction']).toBe('Backward');
        // Every filter is a condition of the index, none is checked row by row afterwards.
        for (const column of columns) expect(scan['Index Cond']).toContain(column);
        expect(scan.Filter).toBeUndefined();
        // The rest of the plan fetches the page's rows by primary key, nothing else.
        for (const node of nodes.filter((n) => n['Relation Name'] === 'history_items' && n !== scan)) {
          expect(node).toMatchObject({ 'Node Type': 'Index Scan', 'Index Name': 'PK_history_items' });
        }
      },
    );

    it('answers the total from the per-user counts on their primary key, and it is exact', async () => {
      const { count } = historyListStatements(heavyId, { page: 1, limit: LIMIT, ...filter });

      const nodes = await explain(count);
      const [{ total }] = (await db.query<{ total: number }>(count.text, count.values)).rows;

      expect(nodes.filter((node) => node['Node Type'] === 'Seq Scan')).toEqual([]);
      const scans = nodes.filter((node) => node['Index Name'] !== undefined);
      expect(scans).toHaveLength(1);
      expect(scans[0]['Index Name']).toBe('PK_history_counts');
      for (const column of columns) expect(scans[0]['Index Cond']).toContain(column);
      const { rows } = await db.query<{ exact: number }>(
        `SELECT count(*)::int AS exact FROM history_items
          WHERE user_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR generation_type = $3)`,
        [heavyId, filter.status ?? null, filter.generationType ?? null],
      );
      expect(total).toBe(rows[0].exact);
    });

    it('is what the service runs: its pages are the rows the statement selects', async () => {
      const query = new URLSearchParams({
        ...(filter.status && { status: filter.status }),
        ...(filter.generationType && { generation_type: filter.generationType }),
      });
      // The plainest way to say what a page is, to hold the statement and the service against.
      const reference = await db.query<{ id: string }>(
        `SELECT id FROM history_items
          WHERE user_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR generation_type = $3)
          ORDER BY created_at DESC, id DESC`,
        [heavyId, filter.status ?? null, filter.generationType ?? null],
      );
      const all = reference.rows.map((row) => row.id);
      for (const page of [1, 2, 5]) {
        const expected = all.slice((page - 1) * LIMIT, page * LIMIT);
        const { page: statement, count } = historyListStatements(heavyId, { page, limit: LIMIT, ...filter });
        const rows = (await db.query<{ id: string }>(statement.text, statement.values)).rows;
        const [{ total }] = (await db.query<{ total: number }>(count.text, count.values)).rows;

        const { status, body } = await heavy.list(`${query.toString()}&page=${page}`.replace(/^&/, ''));

        expect(status).toBe(200);
        expect(expected).toHaveLength(LIMIT);
        expect(rows.map((row) => row.id)).toEqual(expected);
        expect(body.items.map((item) => item.history_item_id)).toEqual(expected);
        expect(total).toBe(all.length);
        expect(body.total).toBe(all.length);
      }
    });
  });
});
