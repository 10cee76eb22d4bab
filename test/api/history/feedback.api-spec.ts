import type pg from 'pg';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { connect, insertItems, type SeededItem, userIdOf } from '../../support/history.js';
import { Client, type HistoryItemBody } from '../../support/client.js';
import { unsignedItem } from '../../support/media.js';

type UnsignedItem = ReturnType<typeof unsignedItem<HistoryItemBody>>;

const CREATED_AT = '2025-03-01T10:00:00.000Z';

describe('PATCH /user/generation-history/feedback/{id}', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let db: pg.Client;
  let owner: Client;
  let stranger: Client;
  let ownerId: string;

  async function seed(status: SeededItem['status'], like: boolean | null = null): Promise<string> {
    const [item] = await insertItems(db, ownerId, [{ status, generationType: 'upper', createdAt: CREATED_AT, like }]);
    return item.id;
  }

  /** The item as its owner reads it, its media URLs unsigned: each read signs them afresh. */
  async function read(id: string): Promise<UnsignedItem> {
    const { status, body } = await owner.get(id);
    expect(status).toBe(200);
    return unsignedItem(body as HistoryItemBody);
  }

  beforeAll(async () => {
    env = await createTestEnvironment();
    // No worker: nothing but the test changes the items (the reconciler would time out old pending ones).
    sut = await startService({ ...env.serviceEnv, ROLE: 'api' });
    db = await connect(env.databaseUrl);
    const ownerKey = await createUserWithKey(env.databaseUrl);
    ownerId = await userIdOf(db, ownerKey);
    owner = new Client(sut.baseUrl, ownerKey);
    stranger = new Client(sut.baseUrl, await createUserWithKey(env.databaseUrl));
  }, 60_000);

  afterAll(async () => {
    await db?.end();
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  describe('on a complete item', () => {
    it.each([true, false, null])('sets like to %p and answers 200 with the updated item', async (like) => {
      const id = await seed('complete', like === null ? true : null);
      const before = await read(id);

      const { status, body } = await owner.feedback(id, JSON.stringify({ like }));

      expect(status).toBe(200);
      expect(unsignedItem(body)).toEqual({ ...before, like, updated_at: expect.any(String) });
      expect(Date.parse(body.updated_at)).toBeGreaterThan(Date.parse(before.updated_at));
      expect(await read(id)).toEqual(unsignedItem(body));
    });

    it('clears earlier feedback with null', async () => {
      const id = await seed('complete');
      expect((await owner.feedback(id, '{"like": false}')).body.like).toBe(false);

      const { status, body } = await owner.feedback(id, '{"like": null}');

      expect(status).toBe(200);
      expect(body.like).toBeNull();
      expect((await read(id)).like).toBeNull();
    });

    it('changes true to false and back', async () => {
      const id = await seed('complete');

      expect((await owner.feedback(id, '{"like":true}')).body.like).toBe(true);
      expect((await owner.feedback(id, '{"like":false}')).body.like).toBe(false);
      expect((await owner.feedback(id, '{"like":true}')).body.like).toBe(true);
      expect((await read(id)).like).toBe(true);
    });

    it('accepts the same value twice', async () => {
      const id = await seed('complete');
      await owner.feedback(id, '{"like":true}');

      const { status, body } = await owner.feedback(id, '{"like":true}');

      expect(status).toBe(200);
      expect(body.like).toBe(true);
    });

    it('accepts a charset on the JSON content type and an upper-case id', async () => {
      const id = await seed('complete');

      const { status, body } = await owner.feedback(
        id.toUpperCase(),
        '{"like":false}',
        'application/json; charset=utf-8',
      );

      expect(status).toBe(200);
      expect(body.history_item_id).toBe(id);
      expect(body.like).toBe(false);
    });
  });

  describe.each(['pending', 'error'] as const)('on an item that is %s', (state) => {
    it.each([true, false, null])(
      'answers like=%p with 409 not_complete and leaves the item as it was',
      async (like) => {
        const id = await seed(state);
        const before = await read(id);

        const { status, contentType, body } = await owner.feedback(id, JSON.stringify({ like }));

        expect(status).toBe(409);
        expect(contentType).toBe('application/problem+json');
        expect(body).toMatchObject({ status: 409, code: 'not_complete', type: 'urn:igs:problem:not_complete' });
        expect(await read(id)).toEqual(before);
      },
    );
  });

  describe('a body that is not exactly {"like": true | false | null}', () => {
    let id: string;
    let before: UnsignedItem;

    beforeAll(async () => {
      id = await seed('complete', true);
      before = await read(id);
    });

    afterEach(async () => {
      // Nothing of a refused body is applied.
      expect(await read(id)).toEqual(before);
    });

    it.each([
      ['another field besides like', '{"like": false, "comment": "meh"}', 'application/json'],
      ['only another field', '{"liked": false}', 'application/json'],
      ['like as the string "yes"', '{"like": "yes"}', 'application/json'],
      ['like as the string "false"', '{"like": "false"}', 'application/json'],
      ['like as a number', '{"like": 0}', 'application/json'],
      ['like as an object', '{"like": {}}', 'application/json'],
      ['like missing', '{}', 'application/json'],
      ['an array', '[{"like": false}]', 'application/json'],
      ['an empty body', '', 'application/json'],
    ])('answers %s with 400 validation_failed', async (_case, body, contentType) => {
      const answer = await owner.feedback(id, body, contentType);

      expect(answer.status).toBe(400);
      expect(answer.contentType).toBe('application/problem+json');
      expect(answer.body).toMatchObject({ status: 400, code: 'validation_failed' });
      expect(answer.body.errors?.[0].field).toBe('like');
    });

    it.each([
      ['broken JSON', '{"like": fals', 'application/json'],
      ['JSON that is not an object or array', 'false', 'application/json'],
      ['text/plain', '{"like": false}', 'text/plain'],
      ['a form', 'like=false', 'application/x-www-form-urlencoded'],
    ])('answers %s with 400 bad_request', async (_case, body, contentType) => {
      const answer = await owner.feedback(id, body, contentType);

      expect(answer.status).toBe(400);
      expect(answer.contentType).toBe('application/problem+json');
      expect(answer.body).toMatchObject({ status: 400, code: 'bad_request', type: 'urn:igs:problem:bad_request' });
    });

    it('answers a request without a body or Content-Type with 400 bad_request', async () => {
      const answer = await owner.call(
        'PATCH',
        '/user/generation-history/feedback/{id}',
        `/user/generation-history/feedback/${id}`,
      );

      expect(answer.status).toBe(400);
      expect(answer.contentType).toBe('application/problem+json');
      expect(answer.body).toMatchObject({ status: 400, code: 'bad_request' });
    });
  });

  it.each(['not-a-uuid', '12345', '3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c4', '3f6c1d2e8a4b4c7e9f215b0d7e9a1c44x'])(
    'answers an id that is not a UUID (%s) with 400 naming id',
    async (badId) => {
      const { status, contentType, body } = await owner.feedback(badId, '{"like": true}');

      expect(status).toBe(400);
      expect(contentType).toBe('application/problem+json');
      expect(body).toMatchObject({ code: 'validation_failed' });
      expect(body.errors?.[0].field).toBe('id');
    },
  );

  it('answers a missing item with 404', async () => {
    const { status, body } = await owner.feedback('3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44', '{"like": true}');

    expect(status).toBe(404);
    expect(body).toMatchObject({ code: 'not_found' });
  });

  it.each([true, false, null])(
    'answers another user’s item with 404 for like=%p and leaves it unchanged',
    async (like) => {
      const id = await seed('complete', like === true ? false : true);
      const before = await read(id);

      const { status, contentType, body } = await stranger.feedback(id, JSON.stringify({ like }));

      expect(status).toBe(404);
      expect(contentType).toBe('application/problem+json');
      expect(body).toMatchObject({ status: 404, code: 'not_found' });
      expect(await read(id)).toEqual(before);
    },
  );

  it('answers another user’s pending item with 404, not 409', async () => {
    const id = await seed('pending');

    const { status, body } = await stranger.feedback(id, '{"like": true}');

    expect(status).toBe(404);
    expect(body.code).toBe('not_found');
  });
});
