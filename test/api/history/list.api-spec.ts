import type pg from 'pg';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import {
  connect,
  insertItems,
  newestFirst,
  type SeededItem,
  type SeedItem,
  type Status,
  userIdOf,
} from '../../support/history.js';
import { Client, type HistoryPageBody } from '../../support/client.js';
import { signedPathOf, unsignedItem } from '../../support/media.js';

const STATUSES: Status[] = ['pending', 'complete', 'error'];
const BASE_TIME = Date.parse('2025-03-01T10:00:00.000Z');

function minutesAfterBase(minutes: number): string {
  return new Date(BASE_TIME + minutes * 60_000).toISOString();
}

function idsOf(page: HistoryPageBody): string[] {
  return page.items.map((item) => item.history_item_id);
}

function ids(items: SeededItem[]): string[] {
  return items.map((item) => item.id);
}

describe('GET /user/generation-history', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let db: pg.Client;

  /** A user with a key and the items given, written straight into the table. */
  async function userWith(items: SeedItem[]): Promise<{ client: Client; items: SeededItem[] }> {
    const key = await createUserWithKey(env.databaseUrl);
    const seeded = await insertItems(db, await userIdOf(db, key), items);
    return { client: new Client(sut.baseUrl, key), items: seeded };
  }

  beforeAll(async () => {
    env = await createTestEnvironment();
    // No worker: nothing but the test changes the items (the reconciler would time out old pending ones).
    sut = await startService({ ...env.serviceEnv, ROLE: 'api' });
    db = await connect(env.databaseUrl);
  }, 60_000);

  afterAll(async () => {
    await db?.end();
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  describe('an empty history', () => {
    let client: Client;

    beforeAll(async () => {
      ({ client } = await userWith([]));
    });

    it.each(['', 'status=complete', 'generation_type=upper', 'status=error&generation_type=enhance', 'limit=5'])(
      'answers no items, total 0 and total_pages 0 (%s)',
      async (query) => {
        const { status, body } = await client.list(query);

        expect(status).toBe(200);
        expect(body).toEqual({
          items: [],
          page: 1,
          limit: query === 'limit=5' ? 5 : 20,
          total: 0,
          total_pages: 0,
        });
      },
    );

    it('answers a later page of an empty history with 200 and no items', async () => {
      const { status, body } = await client.list('page=3');

      expect(status).toBe(200);
      expect(body).toEqual({ items: [], page: 3, limit: 20, total: 0, total_pages: 0 });
    });
  });

  describe('a history of 25 items', () => {
    let client: Client;
    let expected: SeededItem[];

    beforeAll(async () => {
      // Written in an order unrelated to their times, so the order of the answer is not the order of the rows.
      const minutes = Array.from({ length: 25 }, (_, i) => (i * 7) % 25);
      const seeded = await userWith(
        minutes.map((minute, i) => ({
          status: STATUSES[i % 3],
          generationType: ['upper', 'lower', 'enhance', 'product_card'][i % 4],
          createdAt: minutesAfterBase(minute),
          like: i % 3 === 1 ? i % 2 === 0 : null,
        })),
      );
      client = seeded.client;
      expected = newestFirst(seeded.items);
    });

    it('answers page 1 with 20 items, newest first, when no parameter is given', async () => {
      const { status, body } = await client.list();

      expect(status).toBe(200);
      expect(body).toMatchObject({ page: 1, limit: 20, total: 25, total_pages: 2 });
      expect(idsOf(body)).toEqual(ids(expected.slice(0, 20)));
    });

    it('answers the rest on page 2', async () => {
      const { status, body } = await client.list('page=2');

      expect(status).toBe(200);
      expect(body).toMatchObject({ page: 2, limit: 20, total: 25, total_pages: 2 });
      expect(idsOf(body)).toEqual(ids(expected.slice(20)));
    });

    it('shows each item in the list exactly as it is shown on its own', async () => {
      const { body } = await client.list('limit=25');

      expect(body.items).toHaveLength(25);
      for (const item of body.items) {
        const single = await client.get(item.history_item_id);
        expect(single.status).toBe(200);
        // Its media URLs are signed afresh by each read.
        expect(unsignedItem(item)).toEqual(unsignedItem(single.body));
      }
    });

    it('shows the stored state of every item', async () => {
      const { body } = await client.list('limit=25');

      for (const [index, item] of body.items.entries()) {
        const seeded = expected[index];
        expect(item).toMatchObject({
          history_item_id: seeded.id,
          generation_type: seeded.generationType,
          status: seeded.status,
          like: seeded.like ?? null,
          created_at: seeded.createdAt,
        });
        if (seeded.status === 'complete') {
          expect(item.preview_url).toMatch(signedPathOf(seeded.id, 'preview.webp'));
          expect(item.stock_url).toMatch(signedPathOf(seeded.id, 'stock.jpg'));
        } else {
          expect([item.preview_url, item.stock_url, item.output_url]).toEqual([null, null, null]);
        }
        expect(item.error === null).toBe(seeded.status !== 'error');
      }
    });

    it.each([
      [1, 25],
      [7, 4],
      [20, 2],
      [24, 2],
      [25, 1],
      [26, 1],
      [100, 1],
    ])('with limit=%i counts total 25 and total_pages %i', async (limit, totalPages) => {
      const { status, body } = await client.list(`limit=${limit}`);

      expect(status).toBe(200);
      expect(body).toMatchObject({ page: 1, limit, total: 25, total_pages: totalPages });
      expect(body.items).toHaveLength(Math.min(limit, 25));
      expect(totalPages).toBe(Math.ceil(25 / limit));
    });

    it('answers the last page with what is left over', async () => {
      const { body } = await client.list('page=4&limit=7');

      expect(body).toMatchObject({ page: 4, limit: 7, total: 25, total_pages: 4 });
      expect(idsOf(body)).toEqual(ids(expected.slice(21)));
    });

    it.each([
      ['page=3', 3, 20],
      ['page=5&limit=7', 5, 7],
      ['page=1000', 1000, 20],
      ['page=9007199254740991&limit=100', 9007199254740991, 100],
    ])('answers a page past the end (%s) with 200, no items and the right total', async (query, page, limit) => {
      const { status, body } = await client.list(query);

      expect(status).toBe(200);
      expect(body).toEqual({ items: [], page, limit, total: 25, total_pages: Math.ceil(25 / limit) });
    });

    it('ignores query parameters it does not know', async () => {
      const { status, body } = await client.list('sort=oldest&user_id=someone-else');

      expect(status).toBe(200);
      expect(idsOf(body)).toEqual(ids(expected.slice(0, 20)));
    });
  });

  describe('items created at the same instant', () => {
    const SAME_TIME = minutesAfterBase(600);
    let client: Client;
    let expected: SeededItem[];

    beforeAll(async () => {
      const items: SeedItem[] = [
        ...Array.from({ length: 61 }, (_, i) => ({
          status: STATUSES[i % 3],
          generationType: 'enhance',
          createdAt: SAME_TIME,
        })),
        ...[1, 2, 3, 4].map((i) => ({
          status: 'complete' as const,
          generationType: 'upper',
          createdAt: minutesAfterBase(600 + i),
        })),
        ...[1, 2, 3, 4].map((i) => ({
          status: 'complete' as const,
          generationType: 'upper',
          createdAt: minutesAfterBase(600 - i),
        })),
      ];
      const seeded = await userWith(items);
      client = seeded.client;
      expected = newestFirst(seeded.items);
      // Another user's items at the very same instant, so ties cross users too.
      await userWith(items.slice(0, 30));
    });

    async function walk(limit: number): Promise<string[][]> {
      const pages: string[][] = [];
      const first = await client.list(`limit=${limit}`);
      for (let page = 1; page <= first.body.total_pages; page++) {
        const { status, body } = await client.list(`page=${page}&limit=${limit}`);
        expect(status).toBe(200);
        expect(body).toMatchObject({ page, limit, total: 69, total_pages: 10 });
        pages.push(idsOf(body));
      }
      return pages;
    }

    it('shows every item exactly once over all pages of 7, newest first and ties by id descending', async () => {
      const pages = await walk(7);

      expect(pages).toHaveLength(10);
      expect(pages.map((page) => page.length)).toEqual([7, 7, 7, 7, 7, 7, 7, 7, 7, 6]);
      const walked = pages.flat();
      expect(new Set(walked).size).toBe(69);
      expect(walked).toEqual(ids(expected));
    });

    it('gives the same pages on every walk', async () => {
      const first = await walk(7);
      const second = await walk(7);

      expect(second).toEqual(first);
    });

    it('answers the page after the last with no items', async () => {
      const { status, body } = await client.list('page=11&limit=7');

      expect(status).toBe(200);
      expect(body).toEqual({ items: [], page: 11, limit: 7, total: 69, total_pages: 10 });
    });
  });

  describe('filters', () => {
    const TYPES = ['upper', 'lower', 'enhance'];
    let client: Client;
    let mine: SeededItem[];
    let theirs: SeededItem[];

    beforeAll(async () => {
      // 1 to 4 items of each status and type, some of them at the same instant.
      const items: SeedItem[] = [];
      for (const [s, status] of STATUSES.entries()) {
        for (const [t, generationType] of TYPES.entries()) {
          const count = 1 + ((s * 3 + t) % 4);
          for (let i = 0; i < count; i++) {
            items.push({ status, generationType, createdAt: minutesAfterBase(1000 + ((s * 5 + t * 3 + i * 2) % 9)) });
          }
        }
      }
      const seeded = await userWith(items);
      client = seeded.client;
      mine = seeded.items;
      // Another user with items of the very same statuses, types and times.
      theirs = (await userWith(items)).items;
    });

    it.each([
      [{ status: 'pending' }],
      [{ status: 'complete' }],
      [{ status: 'error' }],
      [{ generation_type: 'upper' }],
      [{ generation_type: 'enhance' }],
      [{ status: 'complete', generation_type: 'upper' }],
      [{ status: 'error', generation_type: 'lower' }],
      [{ status: 'pending', generation_type: 'enhance' }],
    ])('shows only the items matching %j, newest first, with their count', async (filter: Record<string, string>) => {
      const matching = newestFirst(
        mine.filter(
          (item) =>
            (!filter.status || item.status === filter.status) &&
            (!filter.generation_type || item.generationType === filter.generation_type),
        ),
      );
      expect(matching.length).toBeGreaterThan(0);

      const { status, body } = await client.list(`${new URLSearchParams(filter).toString()}&limit=100`);

      expect(status).toBe(200);
      expect(body).toMatchObject({ page: 1, limit: 100, total: matching.length, total_pages: 1 });
      expect(idsOf(body)).toEqual(ids(matching));
      for (const item of body.items) {
        if (filter.status) expect(item.status).toBe(filter.status);
        if (filter.generation_type) expect(item.generation_type).toBe(filter.generation_type);
      }
    });

    it('pages through filtered items with the filtered total', async () => {
      const matching = newestFirst(mine.filter((item) => item.status === 'complete'));

      const { body } = await client.list('status=complete&limit=2&page=2');

      expect(body).toMatchObject({
        page: 2,
        limit: 2,
        total: matching.length,
        total_pages: Math.ceil(matching.length / 2),
      });
      expect(idsOf(body)).toEqual(ids(matching.slice(2, 4)));
    });

    it.each([
      'generation_type=product_card',
      'status=pending&generation_type=furniture_placement',
      // An id of the pattern that is no type's (a tool not yet added, or one withdrawn with no items) lists nothing.
      'generation_type=fashion_swap',
      'generation_type=nope',
    ])('answers a filter nothing matches (%s) with no items, total 0 and total_pages 0', async (query) => {
      const { status, body } = await client.list(query);

      expect(status).toBe(200);
      expect(body).toEqual({ items: [], page: 1, limit: 20, total: 0, total_pages: 0 });
    });

    it.each([
      'limit=100',
      'status=complete&limit=100',
      'generation_type=lower&limit=100',
      'status=error&generation_type=enhance&limit=100',
      'limit=3&page=2',
    ])('never shows another user’s items (%s)', async (query) => {
      const myIds = new Set(ids(mine));
      const theirIds = new Set(ids(theirs));

      const { body } = await client.list(query);

      expect(body.items.length).toBeGreaterThan(0);
      for (const id of idsOf(body)) {
        expect(myIds.has(id)).toBe(true);
        expect(theirIds.has(id)).toBe(false);
      }
    });

    it('counts only the caller’s items', async () => {
      const { body } = await client.list('limit=100');

      expect(body.total).toBe(mine.length);
      expect(new Set(idsOf(body))).toEqual(new Set(ids(mine)));
    });
  });

  describe('invalid parameters', () => {
    let client: Client;

    beforeAll(async () => {
      ({ client } = await userWith([{ status: 'complete', generationType: 'upper', createdAt: minutesAfterBase(0) }]));
    });

    it.each([
      ['page=0', 'page'],
      ['page=-1', 'page'],
      ['page=1.5', 'page'],
      ['page=abc', 'page'],
      ['page=', 'page'],
      ['page=1&page=2', 'page'],
      ['limit=0', 'limit'],
      ['limit=101', 'limit'],
      ['limit=x', 'limit'],
      ['limit=-5', 'limit'],
      ['limit=1e1', 'limit'],
      ['status=done', 'status'],
      ['status=COMPLETE', 'status'],
      ['status=a&status=b', 'status'],
      ['status=pending&status=complete', 'status'],
      ['generation_type=Upper', 'generation_type'],
      ['generation_type=no-pe', 'generation_type'],
      ['generation_type=x', 'generation_type'],
      ['generation_type=upper&generation_type=lower', 'generation_type'],
    ])('answers ?%s with 400 validation_failed naming %s', async (query, field) => {
      const { status, contentType, body } = await client.list(query);

      expect(status).toBe(400);
      expect(contentType).toBe('application/problem+json');
      expect(body).toMatchObject({ status: 400, code: 'validation_failed', type: 'urn:igs:problem:validation_failed' });
      expect(body.errors?.[0].field).toBe(field);
    });
  });
});
