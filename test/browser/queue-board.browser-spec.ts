import type { Browser, Page } from 'playwright-core';
import { launchBrowser } from '../support/chromium.mjs';
import { createJob } from '../support/client.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { inputsFor } from '../support/jobs.js';
import { createUserWithKey, runCli, type RunningService, startService } from '../support/service.js';

const BOARD = '/admin/queues';

/** Content-Security-Policy violations the page reports, as events and as console messages. */
async function watchForViolations(page: Page): Promise<() => Promise<string[]>> {
  const fromConsole: string[] = [];
  page.on('console', (message) => {
    if (message.text().includes('Content Security Policy')) fromConsole.push(message.text());
  });
  // Injected through the DevTools protocol, which the page's policy does not govern.
  await page.addInitScript(`
    globalThis.violations = [];
    document.addEventListener('securitypolicyviolation', (event) =>
      globalThis.violations.push(event.violatedDirective + ' ' + event.blockedURI),
    );
  `);
  return async () => [
    ...fromConsole,
    ...(await page.evaluate(() => (globalThis as unknown as { violations: string[] }).violations)),
  ];
}

function basic(user: string, password: string): string {
  return `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
}

describe('the queue board (/admin/queues)', () => {
  let browser: Browser;
  let env: TestEnvironment;
  let service: RunningService;
  let adminKey: string;
  let userKey: string;
  let jobId: string;

  beforeAll(async () => {
    env = await createTestEnvironment();
    // An API process alone: the job stays waiting in the queue, where the board shows it.
    [browser, service] = await Promise.all([launchBrowser(), startService({ ...env.serviceEnv, ROLE: 'api' })]);
    const created = await runCli(['keys', 'create', '--user', 'ops', '--admin'], env.serviceEnv);
    expect(created.code).toBe(0);
    adminKey = created.stdout.trim();
    userKey = await createUserWithKey(env.databaseUrl);
    jobId = await createJob(service.baseUrl, userKey, await inputsFor('default'));
  }, 90_000);

  afterAll(async () => {
    await browser?.close();
    await service?.stop();
    await env?.dispose();
  }, 60_000);

  it('shows the waiting job to an admin key sent as the password of HTTP Basic, with no CSP violation', async () => {
    const context = await browser.newContext({ httpCredentials: { username: 'ops', password: adminKey } });
    const page = await context.newPage();
    const violations = await watchForViolations(page);

    await page.goto(`${service.baseUrl}${BOARD}/queue/generation?status=waiting`);

    await page.getByText(jobId).first().click({ timeout: 20_000 });
    await page.getByText('historyItemId').waitFor();
    expect(await page.title()).toBe('igs queues');
    expect(await violations()).toEqual([]);
    await context.close();
  }, 60_000);

  it('lists both queues, jobs and webhook deliveries, to an admin key sent as a bearer token', async () => {
    const response = await fetch(`${service.baseUrl}${BOARD}/api/queues`, {
      headers: { Authorization: `Bearer ${adminKey}` },
    });

    expect(response.status).toBe(200);
    const { queues } = (await response.json()) as { queues: { name: string }[] };
    expect(queues.map((queue) => queue.name).sort()).toEqual(['generation', 'webhooks']);
  });

  it('serves the page under a policy of its own: scripts from the service only, nothing framed', async () => {
    const response = await fetch(`${service.baseUrl}${BOARD}`, { headers: { Authorization: basic('x', adminKey) } });
    await response.text();

    expect(response.status).toBe(200);
    const policy = response.headers.get('content-security-policy') ?? '';
    expect(policy).toContain("script-src 'self'");
    expect(policy).toContain("frame-ancestors 'none'");
    expect(policy).not.toContain('unsafe-eval');
  });

  it('answers 401 asking for HTTP Basic without a key, and with an unknown key', async () => {
    for (const headers of [{}, { Authorization: basic('ops', 'igs_not-a-key') }] as Record<string, string>[]) {
      const response = await fetch(`${service.baseUrl}${BOARD}`, { headers });
      await response.text();

      expect(response.status).toBe(401);
      expect(response.headers.get('www-authenticate')).toMatch(/^Basic realm="igs-admin"/);
    }
  });

  it("answers 403 to a user's key, as a bearer token and as HTTP Basic, on the page and on its API", async () => {
    for (const [path, authorization] of [
      [BOARD, `Bearer ${userKey}`],
      [BOARD, basic('someone', userKey)],
      [`${BOARD}/api/queues`, `Bearer ${userKey}`],
    ]) {
      const response = await fetch(`${service.baseUrl}${path}`, { headers: { Authorization: authorization } });
      await response.text();

      expect(response.status).toBe(403);
    }
  });
});
