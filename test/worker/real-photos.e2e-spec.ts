import { readFile } from 'node:fs/promises';
import { postJob, waitForFinal } from '../support/client.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { createUserWithKey, type RunningService, startService } from '../support/service.js';

/** What a client sees when it sends a real photo an object tool cannot cut out (test/fixtures/photos). */
describe('a real photo with a busy background, through the service', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let key: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    sut = await startService(env.serviceEnv);
    key = await createUserWithKey(env.databaseUrl);
  }, 60_000);

  afterAll(async () => {
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  it('is accepted, then ends error unsupported_input with a message saying what photo works', async () => {
    const response = await postJob(sut.baseUrl, key, {
      tool: 'fabric',
      fabric: { data: await readFile('docs/examples/fabric/input-fabric.jpg'), contentType: 'image/jpeg' },
      target: { data: await readFile('test/fixtures/photos/chelsea.png'), contentType: 'image/png' },
    });
    expect(response.status).toBe(202);
    const { history_item_id: id } = (await response.json()) as { history_item_id: string };

    const item = await waitForFinal(sut.baseUrl, key, id);

    expect(item).toMatchObject({ status: 'error', preview_url: null, stock_url: null, output_url: null });
    expect(item.error?.code).toBe('unsupported_input');
    expect(item.error?.message).toMatch(/^The target image needs .* on a plain, evenly coloured background/);
  }, 60_000);
});
