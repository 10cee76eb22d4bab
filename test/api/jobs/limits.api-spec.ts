import { expectMatchesContract } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { inputsFor } from '../../support/jobs.js';
import { rawExchange } from '../../support/raw-http.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { filesUnder, itemsWithInputs, retryAfterSeconds } from '../../support/uploads.js';
import { Client, CREATE_PATH, type ProblemBody, postJob } from '../../support/client.js';

async function expectTooManyRequests(response: Response, code: string): Promise<ProblemBody> {
  expect(response.status).toBe(429);
  const body = (await expectMatchesContract(response, 'POST', CREATE_PATH)) as ProblemBody;
  expect(body).toMatchObject({ type: `urn:igs:problem:${code}`, status: 429, code });
  return body;
}

describe('per-user limits on job creation', () => {
  let env: TestEnvironment;

  beforeAll(async () => {
    env = await createTestEnvironment();
  }, 60_000);

  afterAll(async () => {
    await env?.dispose();
  }, 60_000);

  // No worker in either service: every accepted job stays pending.
  describe('at most 2 pending jobs (LIMIT_MAX_PENDING=2)', () => {
    let sut: RunningService;

    beforeAll(async () => {
      // Six uploads at once may all be in progress together: only the pending limit refuses here.
      sut = await startService({
        ...env.serviceEnv,
        ROLE: 'api',
        LIMIT_MAX_PENDING: '2',
        LIMIT_CONCURRENT_UPLOADS: '6',
      });
    }, 60_000);

    afterAll(async () => {
      await sut?.stop();
    }, 60_000);

    it('refuses the third pending job with 429 too_many_pending and Retry-After, creating nothing', async () => {
      const apiKey = await createUserWithKey(env.databaseUrl);
      const fields = await inputsFor('default');
      for (let i = 0; i < 2; i++) expect((await postJob(sut.baseUrl, apiKey, fields)).status).toBe(202);
      const storedBefore = await itemsWithInputs(env.serviceEnv.INPUT_ROOT);

      const response = await postJob(sut.baseUrl, apiKey, fields);

      await expectTooManyRequests(response, 'too_many_pending');
      expect(retryAfterSeconds(response)).toBeGreaterThanOrEqual(1);
      const history = await new Client(sut.baseUrl, apiKey).list();
      expect(history.body.total).toBe(2);
      expect(history.body.items.map((item) => item.status)).toEqual(['pending', 'pending']);
      // The refused upload is neither kept as a temporary file nor stored as an input.
      expect(await filesUnder(env.serviceEnv.UPLOAD_TMP_DIR)).toEqual([]);
      expect(await itemsWithInputs(env.serviceEnv.INPUT_ROOT)).toEqual(storedBefore);
    });

    it('never lets parallel requests create more pending jobs than allowed', async () => {
      const apiKey = await createUserWithKey(env.databaseUrl);
      const fields = await inputsFor('fashion_swap');
      const storedBefore = await itemsWithInputs(env.serviceEnv.INPUT_ROOT);

      const responses = await Promise.all(Array.from({ length: 6 }, () => postJob(sut.baseUrl, apiKey, fields)));

      const accepted = responses.filter((response) => response.status === 202);
      const refused = responses.filter((response) => response.status !== 202);
      expect(accepted).toHaveLength(2);
      expect(refused).toHaveLength(4);
      const ids: string[] = [];
      for (const response of accepted) {
        ids.push(
          ((await expectMatchesContract(response, 'POST', CREATE_PATH)) as { history_item_id: string }).history_item_id,
        );
      }
      for (const response of refused) await expectTooManyRequests(response, 'too_many_pending');
      const pending = await new Client(sut.baseUrl, apiKey).list('status=pending');
      expect(pending.body.total).toBe(2);
      expect(pending.body.items.map((item) => item.history_item_id).sort()).toEqual([...ids].sort());
      expect((await new Client(sut.baseUrl, apiKey).list()).body.total).toBe(2);
      // Only the two accepted jobs keep inputs; the refused ones were cleaned up.
      expect(await itemsWithInputs(env.serviceEnv.INPUT_ROOT)).toEqual(new Set([...storedBefore, ...ids]));
      expect(await filesUnder(env.serviceEnv.UPLOAD_TMP_DIR)).toEqual([]);
    });
  });

  describe('at most 1 pending job and 2 creations a minute', () => {
    let sut: RunningService;

    beforeAll(async () => {
      sut = await startService({
        ...env.serviceEnv,
        ROLE: 'api',
        LIMIT_MAX_PENDING: '1',
        LIMIT_CREATIONS_PER_MINUTE: '2',
      });
    }, 60_000);

    afterAll(async () => {
      await sut?.stop();
    }, 60_000);

    it('does not count creations refused for the pending limit against the per-minute budget', async () => {
      const apiKey = await createUserWithKey(env.databaseUrl);
      const fields = await inputsFor('default');
      const first = await postJob(sut.baseUrl, apiKey, fields);
      expect(first.status).toBe(202);
      for (let i = 0; i < 3; i++)
        await expectTooManyRequests(await postJob(sut.baseUrl, apiKey, fields), 'too_many_pending');
      const { history_item_id: firstId } = (await first.json()) as { history_item_id: string };
      const deleted = await new Client(sut.baseUrl, apiKey).delete(firstId);
      expect(deleted.status).toBe(204);

      const second = await postJob(sut.baseUrl, apiKey, fields);

      expect(second.status).toBe(202);
      // The two accepted creations are the whole budget.
      await expectTooManyRequests(await postJob(sut.baseUrl, apiKey, fields), 'rate_limited');
    }, 15_000);
  });

  describe('at most 3 creations a minute (LIMIT_CREATIONS_PER_MINUTE=3)', () => {
    let sut: RunningService;

    beforeAll(async () => {
      sut = await startService({ ...env.serviceEnv, ROLE: 'api', LIMIT_CREATIONS_PER_MINUTE: '3' });
    }, 60_000);

    afterAll(async () => {
      await sut?.stop();
    }, 60_000);

    // When a refused client may retry, to the second, is src/generation/limits.spec.ts's and
    // test/integration/creation-rate-limit.int-spec.ts's to prove.
    it('refuses the 4th creation in the minute with 429 rate_limited and a Retry-After', async () => {
      const apiKey = await createUserWithKey(env.databaseUrl);
      const otherKey = await createUserWithKey(env.databaseUrl);
      const fields = await inputsFor('default');
      for (let i = 0; i < 3; i++) expect((await postJob(sut.baseUrl, apiKey, fields)).status).toBe(202);

      const response = await postJob(sut.baseUrl, apiKey, fields);

      await expectTooManyRequests(response, 'rate_limited');
      expect(retryAfterSeconds(response)).toBeGreaterThanOrEqual(1);
      expect((await new Client(sut.baseUrl, apiKey).list()).body.total).toBe(3);
      // The budget is the user's own: another user is unaffected.
      expect((await postJob(sut.baseUrl, otherKey, fields)).status).toBe(202);
    }, 15_000);

    it('refuses a user over budget before reading the upload', async () => {
      const apiKey = await createUserWithKey(env.databaseUrl);
      const fields = await inputsFor('default');
      for (let i = 0; i < 3; i++) expect((await postJob(sut.baseUrl, apiKey, fields)).status).toBe(202);
      const boundary = '----igs-over-budget';
      const partOfBody = `--${boundary}\r\nContent-Disposition: form-data; name="tool"\r\n\r\ndefault\r\n`;

      // Headers and the start of a 5 MB body, the rest never sent: only an answer before reading can come.
      const exchange = await rawExchange({
        port: Number(new URL(sut.baseUrl).port),
        chunks: [
          Buffer.from(
            `POST ${CREATE_PATH} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${apiKey}\r\n` +
              `Content-Type: multipart/form-data; boundary=${boundary}\r\nContent-Length: ${5 * 1024 * 1024}\r\n\r\n${partOfBody}`,
          ),
        ],
        then: 'keep-open',
        until: 'response',
        waitMs: 5_000,
      });

      expect(exchange.closedBy).toBe('client');
      expect(exchange.responses.map((response) => response.status)).toEqual([429]);
    }, 15_000);

    it('counts neither refused uploads nor idempotent replays against the budget', async () => {
      const apiKey = await createUserWithKey(env.databaseUrl);
      const fields = await inputsFor('default');
      const notAnImage = {
        ...fields,
        image: { data: Buffer.from('plain text, not an image'), contentType: 'image/png' },
      };
      for (let i = 0; i < 3; i++) expect((await postJob(sut.baseUrl, apiKey, notAnImage)).status).toBe(415);
      const first = await postJob(sut.baseUrl, apiKey, fields, { 'Idempotency-Key': 'replayed' });
      expect(first.status).toBe(202);
      for (let i = 0; i < 3; i++) {
        expect((await postJob(sut.baseUrl, apiKey, fields, { 'Idempotency-Key': 'replayed' })).status).toBe(202);
      }

      for (let i = 0; i < 2; i++) expect((await postJob(sut.baseUrl, apiKey, fields)).status).toBe(202);

      await expectTooManyRequests(await postJob(sut.baseUrl, apiKey, fields), 'rate_limited');
      expect((await new Client(sut.baseUrl, apiKey).list()).body.total).toBe(3);
    }, 15_000);
  });
});
