import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type FakeCogAnswer, sha256 } from '../../support/fake-cog.js';
import {
  cogEngine,
  expectCompleteWithOutputs,
  final,
  jobSettled,
  listDir,
  mediaFolder,
  type Outputs,
  storedInputs,
  submit,
  uniqueImage,
  worldForBlock,
} from '../../support/harness.js';
import { type HistoryItemBody } from '../../support/client.js';
import { unsignedItem } from '../../support/media.js';

const JOBS = 20;

describe('a job delivered more than once', () => {
  /** Engine time by the sha256 of a job's image and the attempt; other jobs take 100 ms. */
  const delays = new Map<string, (attempt: number) => number>();
  const block = worldForBlock(
    (request): FakeCogAnswer => ({
      kind: 'succeed',
      delayMs: delays.get(Object.values(request.images)[0])?.(request.attempt) ?? 100,
    }),
    {
      services: (fake) => {
        const worker = { ...cogEngine(fake), WORKER_CONCURRENCY: '3' };
        // Two workers on one queue, as in a deployment with replicas.
        return { workers: [worker, worker] };
      },
      timeoutMs: 90_000,
    },
  );

  /** Queues the item once more under another Bull job id, as a lost acknowledgement or a replayed queue would. */
  async function deliverAgain(id: string): Promise<string> {
    const jobId = `dup-${id}`;
    await block.queue.add('generate', { historyItemId: id }, { jobId });
    return jobId;
  }

  async function expectUnchanged(item: HistoryItemBody, outputs: Outputs): Promise<void> {
    const { env, api, key } = block;
    const now = await final(api.baseUrl, key, item.history_item_id);
    // Each read signs its media URLs afresh: reads seconds apart differ in their signatures alone.
    expect(unsignedItem(now)).toEqual(unsignedItem(item));
    const again = await expectCompleteWithOutputs(api.baseUrl, now);
    expect(sha256(again.stock)).toBe(sha256(outputs.stock));
    expect(sha256(again.preview)).toBe(sha256(outputs.preview));
    expect(await listDir(mediaFolder(env, item.history_item_id))).toEqual(['preview.webp', 'stock.jpg']);
  }

  it('leaves only its outputs where a run killed while writing left partial files', async () => {
    const { env, api, key } = block;
    const clothes = await uniqueImage();
    delays.set(sha256(clothes), () => 1500);
    const id = await submit(api.baseUrl, key, clothes);
    // What a worker killed between writing a temporary file and renaming it leaves behind.
    await mkdir(mediaFolder(env, id), { recursive: true });
    await writeFile(join(mediaFolder(env, id), `.${randomUUID()}.tmp`), 'partial');

    const item = await final(api.baseUrl, key, id);

    await expectCompleteWithOutputs(api.baseUrl, item);
    expect(await listDir(mediaFolder(env, id))).toEqual(['preview.webp', 'stock.jpg']);
  });

  it('changes nothing when the job is delivered again after it completed', async () => {
    const { fake, queue, api, key } = block;
    const clothes = await uniqueImage();
    const id = await submit(api.baseUrl, key, clothes);
    const item = await final(api.baseUrl, key, id);
    const outputs = await expectCompleteWithOutputs(api.baseUrl, item);

    await jobSettled(queue, await deliverAgain(id));

    await expectUnchanged(item, outputs);
    // The item was final, so the second delivery did not even call the engine.
    expect(fake.requestsFor(clothes)).toHaveLength(1);
  }, 60_000);

  it('keeps the first result when a second delivery runs at the same time', async () => {
    const { env, fake, queue, api, key } = block;
    const clothes = await uniqueImage();
    // The second delivery's engine call ends well after the first has completed the item.
    delays.set(sha256(clothes), (attempt) => (attempt === 1 ? 1500 : 4000));
    const id = await submit(api.baseUrl, key, clothes);
    await fake.waitFor((f) => f.requestsFor(clothes).length === 1, 'the first delivery to call the engine');
    const duplicate = await deliverAgain(id);
    // Both deliveries PUT the job's prediction id: Cog answers the second with the running prediction's state.
    await fake.waitFor((f) => f.requestsFor(clothes)[0].repeats >= 1, 'the second delivery to call the engine');

    const item = await final(api.baseUrl, key, id);
    const outputs = await expectCompleteWithOutputs(api.baseUrl, item);
    await Promise.all([jobSettled(queue, id), jobSettled(queue, duplicate)]);

    // The first engine call became the result. The second delivery ran the model neither beside it nor after it: it
    // waited on the first run (which had the prediction, then its result) until the item was complete.
    const [first, ...later] = fake.requestsFor(clothes);
    expect([first.answered, first.aborted]).toEqual([true, false]);
    expect(later).toEqual([]);
    await expectUnchanged(item, outputs);
    expect(await storedInputs(env, id)).toEqual([]);
  }, 60_000);

  it(`completes each of ${JOBS} jobs exactly once with two workers taking from the queue`, async () => {
    const { env, fake, queue, api, key } = block;
    const images = await Promise.all(Array.from({ length: JOBS }, () => uniqueImage()));
    const ids = await Promise.all(images.map((clothes) => submit(api.baseUrl, key, clothes)));

    const items = await Promise.all(ids.map((id) => final(api.baseUrl, key, id, 60_000)));
    const outputs = await Promise.all(items.map((item) => expectCompleteWithOutputs(api.baseUrl, item)));
    await Promise.all(ids.map((id) => jobSettled(queue, id)));

    for (const [index, item] of items.entries()) await expectUnchanged(item, outputs[index]);
    for (const clothes of images) expect(fake.requestsFor(clothes).length).toBeGreaterThanOrEqual(1);
    for (const id of ids) expect(await storedInputs(env, id)).toEqual([]);
    // Every job's outputs are its own.
    expect(new Set(outputs.map((output) => sha256(output.stock))).size).toBe(JOBS);
  }, 120_000);
});
