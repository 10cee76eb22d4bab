import { Client, CREATE_PATH, type FormValue, type ProblemBody } from '../../support/client.js';
import { expectMatchesContract } from '../../support/contract.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { createUser, FAST_TIMINGS, Processes } from '../../support/harness.js';
import { makeImage } from '../../support/jobs.js';

/** A budget small enough to spend in a test. */
const CREATIONS_PER_MINUTE = 4;
const MAX_PENDING = 7;

/**
 * `GET /user/usage` and the RateLimit header fields of job creation, on the local engine: what a user reads of their
 * limits, of what they use now and of their month, and how the per-minute budget stands after each creation.
 */
describe('usage and the creation budget', () => {
  let env: TestEnvironment;
  let processes: Processes;
  let client: Client;
  let other: Client;

  beforeAll(async () => {
    env = await createTestEnvironment();
    processes = new Processes(env);
    const service = await processes.start('all', {
      LIMIT_CREATIONS_PER_MINUTE: String(CREATIONS_PER_MINUTE),
      LIMIT_MAX_PENDING: String(MAX_PENDING),
    });
    client = new Client(service.baseUrl, (await createUser(env)).key);
    other = new Client(service.baseUrl, (await createUser(env)).key);
  }, 60_000);

  afterAll(async () => {
    await processes?.stopAll();
    await env?.dispose();
  }, 60_000);

  const image = async (colour: string): Promise<FormValue> => ({
    data: await makeImage(320, 400, 'png', colour),
    filename: 'photo.png',
    contentType: 'image/png',
  });

  /** A product card (it completes) or a try-on with a plain rectangle for a person (it ends no_person_found). */
  async function post(kind: 'completes' | 'fails') {
    const fields: Record<string, FormValue> =
      kind === 'completes'
        ? { tool: 'fashion_card', clothes: await image('#2f6fb0') }
        : { tool: 'fashion_swap', clothes: await image('#2f6fb0'), person: await image('#c0c0c0') };
    const response = await client.postJob(fields);
    const body = await expectMatchesContract(response, 'POST', CREATE_PATH);
    return { response, body };
  }

  it('starts with the limits in force, nothing used and an empty month', async () => {
    const { status, body } = await client.usage();

    const now = new Date();
    expect(status).toBe(200);
    expect(body).toEqual({
      limits: {
        max_pending: MAX_PENDING,
        creations_per_minute: CREATIONS_PER_MINUTE,
        // The test harness's room for one user's requests at once (FAST_TIMINGS), and the default for streams.
        concurrent_uploads: Number(FAST_TIMINGS.LIMIT_CONCURRENT_UPLOADS),
        event_streams: 20,
        held_requests: Number(FAST_TIMINGS.LIMIT_HELD_REQUESTS),
      },
      now: { pending: 0, creations_last_minute: 0 },
      month: {
        period_start: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)).toISOString(),
        jobs: 0,
        complete: 0,
        error: 0,
        by_tool: {},
      },
    });
  });

  it('tells after each creation how many remain this minute, and refuses the one over with r=0', async () => {
    const first = await post('completes');
    const second = await post('fails');

    expect(first.response.headers.get('ratelimit-policy')).toBe(`"creations";q=${CREATIONS_PER_MINUTE};w=60`);
    expect(first.response.headers.get('ratelimit')).toMatch(/^"creations";r=3;t=\d+$/);
    expect(second.response.headers.get('ratelimit')).toMatch(/^"creations";r=2;t=\d+$/);
    const ids = [first.body, second.body].map((body) => (body as { history_item_id: string }).history_item_id);
    const [completed, failed] = await Promise.all(ids.map((id) => client.waitForFinal(id)));
    expect([completed.status, failed.status]).toEqual(['complete', 'error']);

    const usage = (await client.usage()).body;
    expect(usage.now).toEqual({ pending: 0, creations_last_minute: 2 });
    expect(usage.month).toMatchObject({
      jobs: 2,
      complete: 1,
      error: 1,
      by_tool: { fashion_card: { jobs: 1, complete: 1, error: 0 }, fashion_swap: { jobs: 1, complete: 0, error: 1 } },
    });
    // Another user's jobs are not this user's usage.
    expect((await other.usage()).body.month.jobs).toBe(0);

    // A deleted item still counted: the month is what was used, not what is kept.
    await client.delete(ids[0]);
    expect((await client.usage()).body.month).toMatchObject({ jobs: 2, complete: 1, error: 1 });

    await post('completes');
    const last = await post('completes');
    expect(last.response.headers.get('ratelimit')).toMatch(/^"creations";r=0;t=\d+$/);
    const refused = await post('completes');
    expect(refused.response.status).toBe(429);
    expect((refused.body as ProblemBody).code).toBe('rate_limited');
    const retryAfter = refused.response.headers.get('retry-after');
    expect(refused.response.headers.get('ratelimit')).toBe(`"creations";r=0;t=${retryAfter}`);
    expect((await client.usage()).body.now.creations_last_minute).toBe(CREATIONS_PER_MINUTE);
  }, 60_000);
});
