import { randomUUID } from 'node:crypto';
import contractSchema from '../../support/contract-schema.cjs';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { inputsFor } from '../../support/jobs.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { fetchMedia } from '../../support/history.js';
import { Client, type HistoryItemBody, postJob, waitForFinal } from '../../support/client.js';
import { unsignedItem } from '../../support/media.js';

/** Every route of the contract that names a user's history item, with a request that would change it. */
const ID_ROUTES: Record<string, { method: string; pathTemplate: string; path: (id: string) => string; body?: string }> =
  {
    'GET /user/generation-history/{id}': {
      method: 'GET',
      pathTemplate: '/user/generation-history/{id}',
      path: (id) => `/user/generation-history/${id}`,
    },
    'PATCH /user/generation-history/feedback/{id}': {
      method: 'PATCH',
      pathTemplate: '/user/generation-history/feedback/{id}',
      path: (id) => `/user/generation-history/feedback/${id}`,
      body: '{"like": false}',
    },
    'GET /user/generation-history/{id}/events': {
      method: 'GET',
      pathTemplate: '/user/generation-history/{id}/events',
      path: (id) => `/user/generation-history/${id}/events`,
    },
    'POST /user/generation-history/{id}/cancel': {
      method: 'POST',
      pathTemplate: '/user/generation-history/{id}/cancel',
      path: (id) => `/user/generation-history/${id}/cancel`,
    },
    'DELETE /user/generation-history/{id}': {
      method: 'DELETE',
      pathTemplate: '/user/generation-history/{id}',
      path: (id) => `/user/generation-history/${id}`,
    },
    // A result, by key rather than by its signed URL: another user's key finds nothing there.
    'GET /media/{id}/{file}': {
      method: 'GET',
      pathTemplate: '/media/{id}/{file}',
      path: (id) => `/media/${id}/stock.jpg`,
    },
  };

describe('one user’s history items, seen by another user', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let owner: Client;
  let stranger: Client;
  let id: string;
  let original: HistoryItemBody;

  beforeAll(async () => {
    env = await createTestEnvironment();
    sut = await startService(env.serviceEnv);
    const ownerKey = await createUserWithKey(env.databaseUrl);
    owner = new Client(sut.baseUrl, ownerKey);
    stranger = new Client(sut.baseUrl, await createUserWithKey(env.databaseUrl));

    const created = await postJob(sut.baseUrl, ownerKey, await inputsFor('default'));
    if (created.status !== 202) throw new Error(`job creation answered ${created.status}: ${await created.text()}`);
    id = ((await created.json()) as { history_item_id: string }).history_item_id;
    const final = await waitForFinal(sut.baseUrl, ownerKey, id);
    if (final.status !== 'complete') throw new Error(`the job ended ${JSON.stringify(final)}`);
    const liked = await owner.feedback(id, '{"like": true}');
    if (liked.status !== 200) throw new Error(`feedback answered ${liked.status}`);
    original = liked.body;
  }, 90_000);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  it('covers every route of the contract that takes a history item id', () => {
    const contract = contractSchema.loadContract() as { paths: Record<string, Record<string, unknown>> };
    // Other ids (a stored file's, `/files/{id}`) are another thing; their isolation is tested with their routes.
    const routes = Object.entries(contract.paths)
      .filter(([path]) => path.includes('{id}') && !path.startsWith('/files/'))
      .flatMap(([path, item]) =>
        Object.entries(item)
          .filter(([method, operation]) => {
            if (!['get', 'put', 'post', 'patch', 'delete'].includes(method)) return false;
            const security = (operation as { security?: unknown[] }).security;
            // Public routes (health, the contract) name no item.
            return security === undefined || security.length > 0;
          })
          .map(([method]) => `${method.toUpperCase()} ${path}`),
      );

    expect(routes.sort()).toEqual(Object.keys(ID_ROUTES).sort());
  });

  describe.each(Object.entries(ID_ROUTES))('%s', (_name, route) => {
    async function send(client: Client, itemId: string) {
      return client.call(route.method, route.pathTemplate, route.path(itemId), {
        body: route.body,
        contentType: route.body ? 'application/json' : undefined,
      });
    }

    it('answers the other user with 404, exactly as for an id that does not exist', async () => {
      const foreign = await send(stranger, id);
      const missing = await send(stranger, randomUUID());

      expect(foreign.status).toBe(404);
      expect(foreign.contentType).toBe('application/problem+json');
      expect(foreign.body).toMatchObject({ status: 404, code: 'not_found' });
      expect(missing.status).toBe(404);
      expect(foreign.contentType).toBe(missing.contentType);
      expect(foreign.text).toBe(missing.text);
    });

    it('leaves the owner’s item as it was: status, like and media', async () => {
      await send(stranger, id);

      const { status, body } = await owner.get(id);
      expect(status).toBe(200);
      // Unchanged; its media URLs are signed afresh on each read.
      expect(unsignedItem(body)).toEqual(unsignedItem(original));
      expect(body).toMatchObject({ status: 'complete', like: true });
      for (const path of [body.preview_url!, body.stock_url!]) {
        const media = await fetchMedia(sut.baseUrl, path);
        expect(media.status).toBe(200);
        expect(media.bytes).toBeGreaterThan(0);
      }
      const { body: page } = await owner.list();
      expect(page.items.map((item) => item.history_item_id)).toEqual([id]);
    });
  });
});
