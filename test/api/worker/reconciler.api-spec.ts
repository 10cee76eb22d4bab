import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import sharp from 'sharp';
import { inputKey } from '../../../src/media/media.js';
import { GENERATE_JOB } from '../../../src/queue/queues.js';
import { type FakeCogAnswer, sha256 } from '../../support/fake-cog.js';
import {
  cogEngine,
  expectCompleteWithOutputs,
  expectFailedLeavingNothing,
  expectNoMedia,
  final,
  jobSettled,
  query,
  storedInputPath,
  storedInputs,
  submit,
  TOOL,
  uniqueImage,
  worldForBlock,
} from '../../support/harness.js';

const DEADLINE_MS = 60_000;
/**
 * The reconciler leaves items younger than 10 s alone (the API may be between its insert and its enqueue), a
 * fixed grace in src/worker/reconciler.ts; an orphan is written as that much older so the test need not wait.
 */
const ORPHAN_AGE_SECONDS = 15;
/** Slow enough for the deadline to pass while the engine works. */
const SLOW_ENGINE_MS = 3000;

describe('the reconciler', () => {
  const delays = new Map<string, number>();
  const block = worldForBlock(
    (request): FakeCogAnswer => ({
      kind: 'succeed',
      delayMs: delays.get(Object.values(request.images)[0]) ?? 0,
    }),
    {
      services: (fake) => {
        // The boot refuses a deadline shorter than an engine's timeout: the engine's attempt is given less
        // than the job.
        const settings = {
          ...cogEngine(fake),
          JOB_DEADLINE_MS: String(DEADLINE_MS),
          ENGINE_TIMEOUT_MS: String(DEADLINE_MS),
        };
        return { api: settings, workers: [settings] };
      },
    },
  );

  /**
   * A pending item as the API writes it (row plus stored input), `ageSeconds` old, whose job never reached the
   * queue: the API stopped between its insert and its enqueue.
   */
  async function insertOrphan(clothes: Buffer, ageSeconds: number): Promise<string> {
    const { env, userId } = block;
    const id = randomUUID();
    const { width, height } = await sharp(clothes).metadata();
    await mkdir(env.serviceEnv.INPUT_ROOT, { recursive: true });
    await writeFile(storedInputPath(env, id, 'clothes'), clothes);
    const inputs = { clothes: { key: inputKey(id, 'clothes'), format: 'png', width, height, bytes: clothes.length } };
    await query(
      env,
      `INSERT INTO history_items (id, user_id, tool, generation_type, status, inputs, texts, created_at, updated_at)
       VALUES ($1, $2, $3, 'product_card', 'pending', $4, '{}',
               now() - make_interval(secs => $5), now() - make_interval(secs => $5))`,
      [id, userId, TOOL, JSON.stringify(inputs), ageSeconds],
    );
    // No job was queued for it: only the reconciler may queue one, and its sweep may already have come.
    return id;
  }

  it('queues a pending item that has no job, and it completes without the client doing anything', async () => {
    const { env, fake, api, key } = block;
    const clothes = await uniqueImage();
    const id = await insertOrphan(clothes, ORPHAN_AGE_SECONDS);

    const item = await final(api.baseUrl, key, id);

    await expectCompleteWithOutputs(api.baseUrl, item);
    expect(fake.requestsFor(clothes).length).toBeGreaterThanOrEqual(1);
    expect(await storedInputs(env, id)).toEqual([]);
  }, 60_000);

  it('ends an item pending past JOB_DEADLINE_MS as timeout, and its late result is thrown away', async () => {
    const { env, fake, queue, api, key } = block;
    const clothes = await uniqueImage();
    delays.set(sha256(clothes), SLOW_ENGINE_MS);
    const id = await submit(api.baseUrl, key, clothes);
    await fake.waitFor((f) => f.requestsFor(clothes).length === 1, 'the worker to call the engine');

    await query(env, `UPDATE history_items SET created_at = now() - make_interval(secs => $2) WHERE id = $1`, [
      id,
      (2 * DEADLINE_MS) / 1000,
    ]);
    const item = await final(api.baseUrl, key, id);

    await expectFailedLeavingNothing(env, api.baseUrl, item, 'timeout');
    // The worker stops the engine call it no longer needs; the item stays as it ended, with no media.
    await fake.waitFor((f) => f.requestsFor(clothes)[0].aborted, 'the engine call to be aborted');
    await jobSettled(queue, id);
    expect(await final(api.baseUrl, key, id)).toEqual(item);
    await expectNoMedia(env, api.baseUrl, id);
  }, 60_000);

  it('ends a job-less item already past its deadline as timeout without running it', async () => {
    const { env, fake, api, key } = block;
    const clothes = await uniqueImage();
    const id = await insertOrphan(clothes, (2 * DEADLINE_MS) / 1000);

    const item = await final(api.baseUrl, key, id);

    await expectFailedLeavingNothing(env, api.baseUrl, item, 'timeout');
    expect(fake.requestsFor(clothes)).toHaveLength(0);
  }, 60_000);

  it('never runs a job a worker takes after its item passed the deadline: it ends as timeout', async () => {
    const { env, fake, queue, api, key } = block;
    const clothes = await uniqueImage();
    const id = await insertOrphan(clothes, (2 * DEADLINE_MS) / 1000);
    // Queued as the reconciler's re-queue of a lost job would queue it; the worker takes it at once, before a sweep.
    await queue.add(GENERATE_JOB, { historyItemId: id }, { jobId: id });

    const item = await final(api.baseUrl, key, id);

    await expectFailedLeavingNothing(env, api.baseUrl, item, 'timeout');
    await jobSettled(queue, id);
    expect(fake.requestsFor(clothes)).toHaveLength(0);
  }, 60_000);
});
