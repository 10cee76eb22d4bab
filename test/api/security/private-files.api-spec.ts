import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { mediaFolder, storedInputPath } from '../../support/harness.js';
import { inputsFor } from '../../support/jobs.js';
import { postJob, waitForFinal } from '../../support/client.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';

/** The permission bits of a file or folder, as `ls -l` shows them in octal. */
async function modeOf(path: string): Promise<string> {
  return ((await stat(path)).mode & 0o777).toString(8);
}

describe('people’s photos on the local disk', () => {
  let env: TestEnvironment;
  let api: RunningService;
  let worker: RunningService | undefined;
  let key: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    api = await startService({ ...env.serviceEnv, ROLE: 'api' });
    key = await createUserWithKey(env.databaseUrl);
  }, 60_000);

  afterAll(async () => {
    await worker?.stop();
    await api?.stop();
    await env?.dispose();
  }, 60_000);

  it('keeps uploads, stored inputs and results readable by the service’s own user alone', async () => {
    const response = await postJob(api.baseUrl, key, await inputsFor('fashion_card'));
    expect(response.status).toBe(202);
    const { history_item_id: id } = (await response.json()) as { history_item_id: string };

    // No worker yet: the job is pending, its input where the upload's temporary file was moved to.
    const { UPLOAD_TMP_DIR, INPUT_ROOT, MEDIA_ROOT } = env.serviceEnv;
    expect(await modeOf(UPLOAD_TMP_DIR)).toBe('700');
    expect(await modeOf(INPUT_ROOT)).toBe('700');
    expect(await modeOf(storedInputPath(env, id, 'clothes'))).toBe('600');

    worker = await startService({ ...env.serviceEnv, ROLE: 'worker' });
    expect((await waitForFinal(api.baseUrl, key, id)).status).toBe('complete');

    expect(await modeOf(MEDIA_ROOT)).toBe('700');
    expect(await modeOf(mediaFolder(env, id))).toBe('700');
    for (const file of ['stock.jpg', 'preview.webp']) {
      expect([file, await modeOf(join(mediaFolder(env, id), file))]).toEqual([file, '600']);
    }
  }, 60_000);
});
