import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import pg from 'pg';
import type { Browser, Locator, Page } from 'playwright-core';
import { type HistoryItem, createClient } from '../../client/src/index.js';
import { launchBrowser } from '../support/chromium.mjs';
import { ImageServer } from '../support/image-server.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { type FakeCog, startFakeCog } from '../support/fake-cog.js';
import { type RunningMock, startMock } from '../support/mock.js';
import { startScriptedEvents } from '../support/scripted-events.js';
import { createUserWithKey, type RunningService, startService } from '../support/service.js';

const AXE_SOURCE = readFile(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: { target: string[] }[];
}

/** axe-core's serious and critical findings on the page as it is now. */
async function accessibilityProblems(page: Page): Promise<string[]> {
  // Evaluated through the DevTools protocol, which the page's Content-Security-Policy does not govern.
  await page.evaluate(await AXE_SOURCE);
  const violations = await page.evaluate(async () => {
    const axe = (globalThis as unknown as { axe: { run(): Promise<{ violations: AxeViolation[] }> } }).axe;
    return (await axe.run()).violations;
  });
  return violations
    .filter((violation) => violation.impact === 'serious' || violation.impact === 'critical')
    .map(
      (violation) =>
        `${violation.id}: ${violation.help} (${violation.nodes.map((n) => n.target.join(' ')).join(', ')})`,
    );
}

/** The page's problems a user would not see: script errors and failed requests to its own origin. */
function watchForErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('pageerror', (error) => errors.push(`script error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(`console: ${message.text()}`);
  });
  return errors;
}

interface ImageElement {
  complete: boolean;
  naturalWidth: number;
  addEventListener(type: 'load' | 'error', listener: () => void, options: { once: true }): void;
}

/**
 * Waits until the result shows the full-resolution image (its signed URL), and until it has loaded or failed; a
 * broken image has no natural size. Events and selectors, not a polled expression: the service's Content-Security-
 * Policy forbids the eval a polled string would need.
 */
async function resultRendered(page: Page): Promise<void> {
  const image = page.locator('#result-image[src*="/stock.jpg?"]');
  await image.waitFor();
  const naturalWidth = await image.evaluate((element) => {
    const shown = element as unknown as ImageElement;
    if (shown.complete) return shown.naturalWidth;
    return new Promise<number>((resolve) => {
      for (const type of ['load', 'error'] as const) {
        shown.addEventListener(type, () => resolve(shown.naturalWidth), { once: true });
      }
    });
  });
  expect(naturalWidth).toBeGreaterThan(0);
}

/** The fraction a progress bar shows (its value); null while it is indeterminate (no value). */
async function shownProgress(bar: Locator): Promise<number | null> {
  const value = await bar.getAttribute('value');
  return value === null ? null : Number(value);
}

describe('in a real browser (Debian Chromium)', () => {
  let browser: Browser;
  let env: TestEnvironment;
  let service: RunningService;
  let mock: RunningMock;
  let key: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    // One creation a minute per user: each test's user makes one job, but the one that is to meet a 429.
    [browser, service, mock] = await Promise.all([
      launchBrowser(),
      // Image URLs from a loopback server (the last test): plain http and private addresses allowed, as in development.
      startService({
        ...env.serviceEnv,
        LIMIT_CREATIONS_PER_MINUTE: '1',
        WEBHOOK_ALLOW_HTTP: 'true',
        WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      }),
      startMock(),
    ]);
    key = await createUserWithKey(env.databaseUrl);
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await Promise.all([service?.stop(), mock?.stop()]);
    await env?.dispose();
  }, 60_000);

  it('the playground runs a try-on on the service: submit, live status, the result, like, history, delete', async () => {
    const page = await browser.newPage();
    const errors = watchForErrors(page);
    await page.goto(`${service.baseUrl}/playground`);

    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Use key' }).click();
    await page.getByLabel('Half-body try-on').check();
    await page.getByLabel('Generation type').selectOption('upper');
    await page
      .getByLabel('clothes', { exact: true })
      .setInputFiles('docs/examples/fashion_swap_half-upper/input-clothes.jpg');
    await page.getByLabel('person', { exact: true }).setInputFiles('test/fixtures/photos/astronaut.jpg');
    await page.getByLabel('Seed (optional)').fill('7');
    await page.getByRole('button', { name: 'Generate' }).click();

    await page.getByText('Done.').waitFor({ timeout: 30_000 });
    await resultRendered(page);
    // The gallery: the one result the local engine makes, with the seed it was sent.
    await page.locator('#outputs li').filter({ hasText: 'Result 1: seed 7' }).waitFor();
    expect(await page.locator('#outputs li').count()).toBe(1);
    const row = page.locator('#history li').filter({ hasText: 'fashion_swap_half · upper' });
    await row.getByRole('button', { name: /^Like/ }).click();
    await row.getByRole('button', { name: /^Like/, pressed: true }).waitFor();
    expect(await accessibilityProblems(page)).toEqual([]);
    await page.getByLabel('Filter by status').selectOption('complete');
    await row.getByRole('button', { name: /^Delete/ }).click();
    await page.getByText('Nothing here yet.').waitFor();

    expect(await page.evaluate("sessionStorage.getItem('igs.apiKey')")).toBe(key);
    expect(page.url()).not.toContain(key);
    expect(errors).toEqual([]);
    await page.close();
  }, 60_000);

  it('goes back to the new last page once every item of the last one is deleted', async () => {
    const name = `pages-${randomUUID()}`;
    const pagesKey = await createUserWithKey(env.databaseUrl, name);
    // Eleven failed items (no result image to load), made in the database: a page of ten and one more, without
    // eleven jobs' time.
    const client = new pg.Client({ connectionString: env.databaseUrl });
    await client.connect();
    try {
      await client.query(
        `INSERT INTO history_items (id, user_id, tool, generation_type, status, error_code, error_message, inputs,
                                    completed_at)
         SELECT gen_random_uuid(), users.id, 'default', 'enhance', 'error', 'engine_failed', 'The engine failed.', '{}',
                now()
           FROM users, generate_series(1, 11) WHERE users.name = $1`,
        [name],
      );
    } finally {
      await client.end();
    }
    const page = await browser.newPage();
    const errors = watchForErrors(page);
    await page.goto(`${service.baseUrl}/playground`);
    await page.getByLabel('API key').fill(pagesKey);
    await page.getByRole('button', { name: 'Use key' }).click();
    await page.getByText('Page 1 of 2 (11 items)').waitFor();

    await page.getByRole('button', { name: 'Next', exact: true }).click();
    await page.getByText('Page 2 of 2 (11 items)').waitFor();
    await page
      .locator('#history li')
      .getByRole('button', { name: /^Delete/ })
      .click();

    await page.getByText('Page 1 of 1 (10 items)').waitFor();
    expect(await page.locator('#history li').count()).toBe(10);
    expect(errors).toEqual([]);
    await page.close();
  }, 60_000);

  it('the playground takes an image URL instead of a file for an input, beside a file of another', async () => {
    const images = await ImageServer.start();
    images.route('/person.jpg', {
      kind: 'bytes',
      data: await readFile('test/fixtures/photos/astronaut.jpg'),
      contentType: 'image/jpeg',
    });
    const user = await createUserWithKey(env.databaseUrl);
    const page = await browser.newPage();
    const errors = watchForErrors(page);
    await page.goto(`${service.baseUrl}/playground/`);
    await page.getByLabel('API key').fill(user);
    await page.getByRole('button', { name: 'Use key' }).click();
    await page.getByLabel('Half-body try-on').check();
    await page.getByLabel('Generation type').selectOption('upper');
    await page
      .getByLabel('clothes', { exact: true })
      .setInputFiles('docs/examples/fashion_swap_half-upper/input-clothes.jpg');
    await page.getByLabel('person image URL (instead of a file)').fill(images.url('/person.jpg'));
    await page.getByRole('button', { name: 'Generate' }).click();

    await page.getByText('Done.').waitFor();
    await resultRendered(page);

    // The person came by URL, fetched by the service; the clothes were stored as a file, then named in the job.
    expect(images.requests.get('/person.jpg')).toBe(1);
    const database = new pg.Client({ connectionString: env.databaseUrl });
    await database.connect();
    const { rows } = await database.query('SELECT count(*)::int AS count FROM files').finally(() => database.end());
    expect(rows).toEqual([{ count: 1 }]);
    expect(await accessibilityProblems(page)).toEqual([]);
    expect(errors).toEqual([]);
    await page.close();
    await images.stop();
  }, 60_000);

  it('the playground shows a pending job place in line, then its progress: indeterminate, then the fraction the item carries, gone at complete', async () => {
    // The service's pages, API and job; the job's event stream written by the test, so that it carries progress.
    const scripted = await startScriptedEvents(service.baseUrl);
    const user = await createUserWithKey(env.databaseUrl);
    const page = await browser.newPage();
    const errors = watchForErrors(page);
    await page.goto(`${scripted.baseUrl}/playground/`);
    await page.getByLabel('API key').fill(user);
    await page.getByRole('button', { name: 'Use key' }).click();
    await page.getByLabel('Image enhance').check();
    await page.getByLabel('image', { exact: true }).setInputFiles('docs/examples/default/input-image.jpg');
    await page.getByRole('button', { name: 'Generate' }).click();

    const stream = await scripted.nextStream();
    const final = await createClient({ baseUrl: service.baseUrl, apiKey: user }).waitForJob(stream.id);
    const pending = (progress: number | null): HistoryItem => ({
      ...final,
      status: 'pending',
      preview_url: null,
      stock_url: null,
      output_url: null,
      completed_at: null,
      progress,
    });
    const bar = page.getByRole('progressbar', { name: 'Working on it…' });
    const queued = (position: number): HistoryItem => ({
      ...pending(null),
      started_at: null,
      queue_position: position,
    });
    stream.send(queued(3));
    await page.getByText('Waiting in line: 2 jobs ahead of it.').waitFor();
    stream.send(queued(1));
    await page.getByText('Waiting in line: it is next.').waitFor();
    stream.send(pending(null));
    await page.locator('#job-place').waitFor({ state: 'hidden' });
    await bar.waitFor();
    const unknown = await shownProgress(bar);
    stream.send(pending(0.4));
    await page.locator('#job-progress[value="0.4"]').waitFor();
    const known = await shownProgress(bar);
    const problemsWhilePending = await accessibilityProblems(page);
    stream.send(final);
    stream.end();
    await page.getByText('Done.').waitFor();
    await resultRendered(page);

    expect(final).toMatchObject({ status: 'complete', progress: 1 });
    expect([unknown, known]).toEqual([null, 0.4]);
    expect(problemsWhilePending).toEqual([]);
    expect(await bar.isHidden()).toBe(true);
    expect(await accessibilityProblems(page)).toEqual([]);
    expect(errors).toEqual([]);
    await page.close();
    await scripted.stop();
  }, 60_000);

  it('says in words why a request was refused, and when to retry after a 429', async () => {
    const page = await browser.newPage();
    await page.goto(`${service.baseUrl}/playground/`);
    await page.getByLabel('API key').fill('igs_wrong_key');
    await page.getByRole('button', { name: 'Use key' }).click();
    await page.getByRole('alert').getByText('The API key was not accepted').waitFor();

    await page.getByLabel('API key').fill(await createUserWithKey(env.databaseUrl));
    await page.getByRole('button', { name: 'Use key' }).click();
    await page.getByLabel('Image enhance').check();
    await page.getByLabel('image', { exact: true }).setInputFiles('docs/examples/default/input-image.jpg');
    await page.getByRole('button', { name: 'Generate' }).click();
    await page.getByText(/Working on it|Done\./).waitFor();
    await page.getByRole('button', { name: 'Generate' }).click();

    await page
      .getByRole('alert')
      .getByText(/Try again in \d+ seconds\./)
      .waitFor();
    await page.close();
  }, 60_000);

  it('the playground on the mock: the tools render and a result image renders', async () => {
    const page = await browser.newPage();
    const errors = watchForErrors(page);
    await page.goto(`${mock.baseUrl}/playground/`);

    await page.getByLabel('API key').fill('any-key');
    await page.getByRole('button', { name: 'Use key' }).click();
    await page.getByLabel('Virtual try-on').check();
    expect(await page.getByRole('radio').count()).toBe(7);
    await page.getByLabel('clothes', { exact: true }).setInputFiles('docs/examples/fashion_swap/input-clothes.jpg');
    await page.getByLabel('person', { exact: true }).setInputFiles('docs/examples/fashion_swap/input-person.jpg');
    await page.getByLabel('Results').selectOption('2');
    await page.getByRole('button', { name: 'Generate' }).click();

    await page.getByText('Done.').waitFor({ timeout: 30_000 });
    await resultRendered(page);
    // The gallery of the example item's two results, each a real picture with its seed.
    const results = page.locator('#outputs li');
    await results.filter({ hasText: 'Result 2: seed 42' }).waitFor();
    for (const picture of await page.locator('#outputs img').all()) {
      const width = await picture.evaluate((element) => {
        const shown = element as unknown as ImageElement;
        if (shown.complete) return shown.naturalWidth;
        return new Promise<number>((resolve) => {
          for (const type of ['load', 'error'] as const) {
            shown.addEventListener(type, () => resolve(shown.naturalWidth), { once: true });
          }
        });
      });
      expect(width).toBeGreaterThan(0);
    }
    expect(await results.count()).toBe(2);
    expect(await accessibilityProblems(page)).toEqual([]);
    expect(errors).toEqual([]);
    await page.close();
  }, 60_000);

  it("Swagger UI's Try it out answers 200 on a port other than 3000", async () => {
    expect(new URL(service.baseUrl).port).not.toBe('3000');
    const page = await browser.newPage();
    await page.goto(`${service.baseUrl}/docs`);

    await page.getByRole('button', { name: 'Authorize' }).first().click();
    await page.locator('.modal-ux input').first().fill(key);
    await page.locator('.modal-ux button.authorize').click();
    await page.locator('.modal-ux button.btn-done').click();
    const operation = page.locator('#operations-Generation-listTools');
    await operation.locator('.opblock-summary').click();
    await operation.getByRole('button', { name: 'Try it out' }).click();
    await operation.getByRole('button', { name: 'Execute' }).click();

    const status = operation.locator('.live-responses-table tbody .response-col_status').first();
    await status.waitFor();
    expect((await status.textContent())?.trim()).toBe('200');
    await page.close();
  }, 60_000);
});

describe('the playground on a service whose routing file changes (no rebuild)', () => {
  let browser: Browser;
  let env: TestEnvironment;
  let fake: FakeCog;
  let service: RunningService;
  let routing: string;
  let key: string;
  const engines = (url: string) => `engines:\n  bags:\n    kind: cog\n    url: ${url}\n`;
  const BAG_TOOL = `
tools:
  bag_swap:
    group_tool: fashion
    title: Bag try-on
    generation_types:
      shoulder_bag:
        title: Shoulder bag
        description: Hangs the bag on the person's shoulder.
        inputs:
          person: { kind: image, required: true, description: Photo of one person. }
          bag: { kind: image, required: true, description: 'The bag alone, any background.' }
          note: { kind: text, required: false, max_length: 40, description: A styling note. }
routes:
  bag_swap:
    engine: bags
    inputs: { person: human, bag: item, note: note }
`;

  beforeAll(async () => {
    fake = await startFakeCog();
    fake.setSchema({ properties: { human: { type: 'string' }, item: { type: 'string' }, note: { type: 'string' } } });
    env = await createTestEnvironment();
    routing = join(await mkdtemp(join(tmpdir(), 'playground-routing-')), 'engines.yaml');
    await writeFile(routing, engines(fake.url));
    [browser, service] = await Promise.all([
      launchBrowser(),
      startService({ ...env.serviceEnv, ENGINES_FILE: routing }),
    ]);
    key = await createUserWithKey(env.databaseUrl);
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await service?.stop();
    await fake?.close();
    await env?.dispose();
  }, 60_000);

  it('shows a tool the file adds, its fields as the file describes them, and runs it', async () => {
    const page = await browser.newPage();
    const errors = watchForErrors(page);
    await page.goto(`${service.baseUrl}/playground`);
    await page.getByLabel('API key').fill(key);
    await page.getByRole('button', { name: 'Use key' }).click();
    await page.getByLabel('Half-body try-on').waitFor();
    expect(await page.getByLabel('Bag try-on').count()).toBe(0);

    await writeFile(routing, engines(fake.url) + BAG_TOOL);
    // What a person does to see a change: load the page again, once the service took it (within 10 s). The same
    // build of the page: the catalog is read from the API.
    const client = createClient({ baseUrl: service.baseUrl, apiKey: key });
    const deadline = Date.now() + 10_000;
    while (!(await client.tools()).some((tool) => tool.tool === 'bag_swap')) {
      if (Date.now() > deadline) throw new Error('the service did not take the new tool within 10 s');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await page.reload();
    await page.getByLabel('Bag try-on').check();

    await page.getByText('The bag alone, any background.').waitFor();
    expect(await page.getByLabel('note (optional)').getAttribute('maxlength')).toBe('40');
    await page.getByLabel('person', { exact: true }).setInputFiles('docs/examples/fashion_swap/input-person.jpg');
    await page.getByLabel('bag', { exact: true }).setInputFiles('docs/examples/fashion_card/input-clothes.jpg');
    await page.getByLabel('note (optional)').fill('cross-body');
    await page.getByRole('button', { name: 'Generate' }).click();

    await page.getByText('Done.').waitFor({ timeout: 30_000 });
    await resultRendered(page);
    expect(fake.requests.map((request) => request.texts)).toEqual([{ note: 'cross-body' }]);
    expect(errors).toEqual([]);
    await page.close();
  }, 60_000);
});
