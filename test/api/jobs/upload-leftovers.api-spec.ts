import { randomUUID } from 'node:crypto';
import { mkdir, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { waitUntil } from '../../support/harness.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { connect, insertItems, userIdOf } from '../../support/history.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';
import { filesUnder } from '../../support/uploads.js';

/** Writes a file as if it had been written an hour ago, older than any upload in progress. */
async function writeOld(path: string, data: string): Promise<void> {
  await writeFile(path, data);
  const anHourAgo = new Date(Date.now() - 3600_000);
  await utimes(path, anHourAgo, anHourAgo);
}

describe('what uploads left behind (a process killed mid-request)', () => {
  let env: TestEnvironment;
  let sut: RunningService | undefined;

  beforeAll(async () => {
    env = await createTestEnvironment();
  }, 30_000);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, 30_000);

  it('in UPLOAD_TMP_DIR is removed when an API process starts, once older than any upload in progress; newer files are kept', async () => {
    const folder = env.serviceEnv.UPLOAD_TMP_DIR;
    await mkdir(folder, { recursive: true });
    const [leftover, inProgress] = ['a-photo-from-a-killed-process', 'an-upload-in-progress'];
    await writeOld(join(folder, leftover), 'person.jpg bytes');
    await writeFile(join(folder, inProgress), 'clothes.jpg bytes');

    sut = await startService({ ...env.serviceEnv, ROLE: 'api', LOG_LEVEL: 'info' });

    await waitUntil(async () => !(await filesUnder(folder)).includes(leftover), 'the leftover to be removed');
    // The sweep logs once its removals are done, and its line reaches this process through a pipe: waited for too.
    await waitUntil(() => sut!.output().includes('removed files that uploads left behind'), 'the sweep to log them');
    expect(await filesUnder(folder)).toEqual([inProgress]);
  }, 60_000);

  it('in the input store is removed unless its job is pending: no item (killed before writing it), or one that ended', async () => {
    // The first test's process made the tables; this one seeds them, then starts another.
    await sut?.stop();
    const db = await connect(env.databaseUrl);
    let pendingId: string;
    let completeId: string;
    try {
      const userId = await userIdOf(db, await createUserWithKey(env.databaseUrl));
      const createdAt = new Date(Date.now() - 3600_000).toISOString();
      [{ id: pendingId }, { id: completeId }] = await insertItems(db, userId, [
        { status: 'pending', generationType: 'upper', createdAt },
        { status: 'complete', generationType: 'upper', createdAt },
      ]);
    } finally {
      await db.end();
    }
    const store = env.serviceEnv.INPUT_ROOT;
    await mkdir(store, { recursive: true });
    const kept = [`${pendingId}-person`, `${randomUUID()}-person`, 'an-operators-note'];
    const stray = [`${randomUUID()}-person`, `${completeId}-clothes`];
    await writeOld(join(store, kept[0]), 'a queued job waits for this');
    await writeFile(join(store, kept[1]), 'a job being accepted right now');
    await writeOld(join(store, kept[2]), 'not an input');
    for (const key of stray) await writeOld(join(store, key), "someone's photo");

    sut = await startService({ ...env.serviceEnv, ROLE: 'api', LOG_LEVEL: 'info' });

    await waitUntil(
      async () => (await filesUnder(store)).every((key) => !stray.includes(key)),
      'the stray inputs to be removed',
    );
    await waitUntil(() => sut!.output().includes('removed stored inputs of no pending job'), 'the sweep to log them');
    expect((await filesUnder(store)).sort()).toEqual([...kept].sort());
  }, 60_000);
});
