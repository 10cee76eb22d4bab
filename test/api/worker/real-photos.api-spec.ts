import { readFile } from 'node:fs/promises';
import { type FormValue, postJob, waitForFinal } from '../../support/client.js';
import { decode, meanDiff } from '../../support/pixels.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';

const photo = async (file: string): Promise<FormValue> => ({
  data: await readFile(`test/fixtures/photos/${file}`),
  contentType: file.endsWith('.png') ? 'image/png' : 'image/jpeg',
});
const example = async (path: string): Promise<FormValue> => ({
  data: await readFile(`docs/examples/${path}`),
  contentType: 'image/jpeg',
});

/** What a client sees when it sends real photos (test/fixtures/photos) to each tool. */
describe('real photos through the service', () => {
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

  it('a portrait in an upper-half try-on completes: the torso dressed, the face as it was', async () => {
    const portrait = await photo('astronaut.jpg');
    const response = await postJob(sut.baseUrl, key, {
      tool: 'fashion_swap_half',
      generation_type: 'upper',
      clothes: await example('fashion_swap_half-upper/input-clothes.jpg'),
      person: portrait,
    });
    expect(response.status).toBe(202);
    const { history_item_id: id } = (await response.json()) as { history_item_id: string };

    const item = await waitForFinal(sut.baseUrl, key, id);

    expect(item.status).toBe('complete');
    const stock = await fetch(`${sut.baseUrl}/${item.stock_url!}`);
    expect(stock.status).toBe(200);
    const [before, after] = await Promise.all([
      decode((portrait as { data: Buffer }).data),
      decode(Buffer.from(await stock.arrayBuffer())),
    ]);
    expect([after.width, after.height]).toEqual([512, 512]);
    // The stock image is a JPEG: an unchanged region differs by its re-encoding only.
    expect(meanDiff(before, after, { left: 185, top: 50, width: 80, height: 120 })).toBeLessThan(3);
    expect(meanDiff(before, after, { left: 120, top: 320, width: 160, height: 120 })).toBeGreaterThan(40);
  }, 60_000);

  // Every tool on real photos: complete, or error with a documented code; never a 5xx, never stuck.
  it.each([
    ['fashion_swap', { clothes: 'chelsea.png', person: 'astronaut.jpg' }, 'unsupported_input'],
    ['fashion_swap', { clothes: 'docs:fashion_swap/input-clothes.jpg', person: 'astronaut.jpg' }, 'unsupported_input'],
    [
      'fashion_swap_half',
      { clothes: 'docs:fashion_swap_half-upper/input-clothes.jpg', person: 'chelsea.png' },
      'no_person_found',
    ],
    [
      'fashion_swap_half',
      { clothes: 'docs:fashion_swap_half-upper/input-clothes.jpg', person: 'coffee.png' },
      'no_person_found',
    ],
    ['lengerie', { clothes: 'docs:lengerie/input-clothes.jpg', person: 'astronaut.jpg' }, 'complete'],
    ['fashion_card', { clothes: 'astronaut.jpg' }, 'unsupported_input'],
    ['furniture', { room: 'coffee.png', furniture: 'chelsea.png' }, 'unsupported_input'],
    ['fabric', { fabric: 'coffee.png', target: 'astronaut.jpg' }, 'unsupported_input'],
    ['default', { image: 'astronaut.jpg' }, 'complete'],
  ] as const)(
    '%s with %j ends %s',
    async (tool, files, outcome) => {
      const fields: Record<string, FormValue> = { tool };
      for (const [name, file] of Object.entries(files)) {
        fields[name] = file.startsWith('docs:') ? await example(file.slice(5)) : await photo(file);
      }
      const response = await postJob(sut.baseUrl, key, fields);
      expect(response.status).toBe(202);
      const { history_item_id: id } = (await response.json()) as { history_item_id: string };

      const item = await waitForFinal(sut.baseUrl, key, id);

      expect(item.status === 'complete' ? 'complete' : item.error?.code).toBe(outcome);
      if (item.status === 'error') expect(item.error?.message).toMatch(/\b(Use|needs) /);
    },
    60_000,
  );
});
