import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { lookupPrefix } from '../../src/common/api-key.js';
import { CATALOG } from '../../src/catalog/catalog.js';
import { createJob, waitForFinal } from './client.js';
import { expectMatchesContract } from './contract.js';
import { inputsFor } from './jobs.js';
import { startService } from './service.js';

export type Status = 'pending' | 'complete' | 'error';

/** A history item as a test wants it in the table; everything else gets a plausible value. */
export interface SeedItem {
  status: Status;
  generationType: string;
  /** ISO 8601. */
  createdAt: string;
  like?: boolean | null;
}

export interface SeededItem extends SeedItem {
  id: string;
}

const TOOL_OF_TYPE = new Map(CATALOG.flatMap((tool) => tool.generationTypes.map((type) => [type.id, tool.id])));

/** A connection to the test's database, for seeding rows and looking at them. */
export async function connect(databaseUrl: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  return client;
}

/** The id of the user an API key belongs to. */
export async function userIdOf(db: pg.Client, apiKey: string): Promise<string> {
  const { rows } = await db.query<{ user_id: string }>('SELECT user_id FROM api_keys WHERE prefix = $1', [
    lookupPrefix(apiKey),
  ]);
  if (rows.length !== 1) throw new Error('no such key');
  return rows[0].user_id;
}

/**
 * Writes history items straight into the table (uploads would take far too long for many items); a
 * `complete` or `error` item gets its `completed_at`, an `error` item its error code, as the worker would.
 */
export async function insertItems(db: pg.Client, userId: string, items: SeedItem[]): Promise<SeededItem[]> {
  const seeded = items.map((item) => ({ ...item, id: randomUUID() }));
  for (let start = 0; start < seeded.length; start += 1000) {
    const batch = seeded.slice(start, start + 1000);
    await db.query(
      `INSERT INTO history_items
              (id, user_id, tool, generation_type, status, inputs, "like", error_code, error_message,
               created_at, updated_at, completed_at)
       SELECT id, $1, tool, generation_type, status, '{}', "like",
              CASE WHEN status = 'error' THEN 'engine_failed' END,
              CASE WHEN status = 'error' THEN 'The engine failed 3 times.' END,
              created_at, created_at,
              CASE WHEN status <> 'pending' THEN created_at + interval '5 seconds' END
         FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::boolean[], $7::timestamptz[])
           AS t(id, tool, generation_type, status, "like", created_at)`,
      [
        userId,
        batch.map((item) => item.id),
        batch.map((item) => toolOf(item.generationType)),
        batch.map((item) => item.generationType),
        batch.map((item) => item.status),
        batch.map((item) => item.like ?? null),
        batch.map((item) => item.createdAt),
      ],
    );
  }
  return seeded;
}

function toolOf(generationType: string): string {
  const tool = TOOL_OF_TYPE.get(generationType);
  if (!tool) throw new Error(`unknown generation type ${generationType}`);
  return tool;
}

/** The order the list promises: newest first, ties by id descending (PostgreSQL compares UUIDs bytewise). */
export function newestFirst<T extends { id: string; createdAt: string }>(items: T[]): T[] {
  return [...items].sort((a, b) => {
    const byTime = Date.parse(b.createdAt) - Date.parse(a.createdAt);
    if (byTime !== 0) return byTime;
    return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
  });
}

/** GET of a media path (relative, as the API returns it), without credentials: the media is public. */
export async function fetchMedia(baseUrl: string, path: string): Promise<{ status: number; bytes: number }> {
  const response = await fetch(`${baseUrl}/${path}`);
  const bytes = (await response.clone().arrayBuffer()).byteLength;
  await expectMatchesContract(response, 'GET', '/media/{id}/{file}');
  if (!response.bodyUsed) await response.arrayBuffer();
  return { status: response.status, bytes };
}

/**
 * Complete items of the key's user, one per tool given: created through the API at `apiBaseUrl` (ROLE=api) and
 * run by a worker started for them and stopped again, so jobs the tests create later stay pending instead of
 * taking the CPU from the answers under test.
 */
export async function completeItems(
  apiBaseUrl: string,
  serviceEnv: Record<string, string>,
  apiKey: string,
  tools: string[],
): Promise<string[]> {
  const worker = await startService({ ...serviceEnv, ROLE: 'worker' });
  try {
    const ids: string[] = [];
    for (const tool of tools) {
      const id = await createJob(apiBaseUrl, apiKey, await inputsFor(tool));
      const item = await waitForFinal(apiBaseUrl, apiKey, id);
      if (item.status !== 'complete')
        throw new Error(`the ${tool} job ended as ${item.status}: ${JSON.stringify(item.error)}`);
      ids.push(id);
    }
    return ids;
  } finally {
    await worker.stop();
  }
}
