import { mkdir, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { waitUntil } from '../../support/harness.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { type RunningService, startService } from '../../support/service.js';
import { filesUnder } from '../../support/uploads.js';

describe('files that uploads left in UPLOAD_TMP_DIR (a process killed mid-request)', () => {
  let env: TestEnvironment;
  let sut: RunningService | undefined;

  beforeAll(async () => {
    env = await createTestEnvironment();
  }, 30_000);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, 30_000);

  it('are removed when an API process starts, once older than any upload in progress; newer ones are kept', async () => {
    const folder = env.serviceEnv.UPLOAD_TMP_DIR;
    await mkdir(folder, { recursive: true });
    const [leftover, inProgress] = ['a-photo-from-a-killed-process', 'an-upload-in-progress'];
    await writeFile(join(folder, leftover), 'person.jpg bytes');
    await writeFile(join(folder, inProgress), 'clothes.jpg bytes');
    const anHourAgo = new Date(Date.now() - 3600_000);
    await utimes(join(folder, leftover), anHourAgo, anHourAgo);

    sut = await startService({ ...env.serviceEnv, ROLE: 'api', LOG_LEVEL: 'info' });

    await waitUntil(async () => !(await filesUnder(folder)).includes(leftover), 'the leftover to be removed');
    expect(await filesUnder(folder)).toEqual([inProgress]);
    expect(sut.output()).toContain('removed files that uploads left behind');
  }, 60_000);
});
