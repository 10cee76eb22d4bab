import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { lookupPrefix } from '../../src/common/api-key.js';
import { createTestEnvironment, type TestEnvironment } from '../support/environment.js';
import { createUserWithKey, type RunningService, startService } from '../support/service.js';

/**
 * Dredd checks the built service against openapi/openapi.yaml: every documented response of every operation is a
 * transaction, provoked by test/contract/hooks.cjs or skipped there with its reason.
 */
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const DREDD_TIMEOUT_MS = 150_000;
/** Dredd echoes request and response bodies of failed transactions (the 413 upload is 10 MiB): shorten those. */
const MAX_LINE_CHARS = 4_000;

interface HooksReport {
  total: number;
  skipped: { name: string; reason: string }[];
  unusedSkipRules: string[];
  unknownHookNames: string[];
}

interface DreddRun {
  code: number | null;
  output: string;
}

/** An item of the user in status `error` (final), the only kind that answers feedback with 409 deterministically. */
async function seedErrorItem(databaseUrl: string, apiKey: string): Promise<string> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ user_id: string }>('SELECT user_id FROM api_keys WHERE prefix = $1', [
      lookupPrefix(apiKey),
    ]);
    const id = randomUUID();
    await client.query(
      `INSERT INTO history_items (id, user_id, tool, generation_type, status, inputs, error_code, error_message, completed_at)
       VALUES ($1, $2, 'fashion_card', 'product_card', 'error', '{}', 'engine_failed', 'Seeded by the contract test.', now())`,
      [id, rows[0].user_id],
    );
    return id;
  } finally {
    await client.end();
  }
}

async function runDredd(env: Record<string, string>): Promise<DreddRun> {
  const child = spawn(
    `${ROOT}node_modules/.bin/dredd`,
    [
      'openapi/openapi.yaml',
      env.CONTRACT_BASE_URL,
      '--hookfiles=test/contract/hooks.cjs',
      '--language=nodejs',
      '--loglevel=warning',
    ],
    {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const timer = setTimeout(() => {
    output += `\n[contract test] Dredd did not finish within ${DREDD_TIMEOUT_MS} ms: killed\n`;
    child.kill('SIGKILL');
  }, DREDD_TIMEOUT_MS);
  const [code] = (await once(child, 'close')) as [number | null];
  clearTimeout(timer);
  // Dredd colours its output; the assertions below read it as plain text.
  return { code, output: output.replace(new RegExp(`${String.fromCharCode(0x1b)}\\[[0-9;]*m`, 'g'), '') };
}

function shortenLongLines(text: string): string {
  return text
    .split('\n')
    .map((line) =>
      line.length > MAX_LINE_CHARS
        ? `${line.slice(0, MAX_LINE_CHARS)}... [${line.length - MAX_LINE_CHARS} more chars]`
        : line,
    )
    .join('\n');
}

describe('contract (Dredd against the built service)', () => {
  let env: TestEnvironment | undefined;
  let service: RunningService | undefined;
  let hooksEnv: Record<string, string>;

  beforeAll(async () => {
    env = await createTestEnvironment();
    // hooks.cjs provokes the 429 of failed authentications from addresses it names in X-Forwarded-For.
    service = await startService({ ...env.serviceEnv, TRUST_PROXY: '1' });
    const apiKey = await createUserWithKey(env.databaseUrl);
    // The second user asks for the first user's items: those must answer 404, exactly like missing ones.
    const otherApiKey = await createUserWithKey(env.databaseUrl);
    hooksEnv = {
      CONTRACT_BASE_URL: service.baseUrl,
      CONTRACT_API_KEY: apiKey,
      CONTRACT_OTHER_API_KEY: otherApiKey,
      CONTRACT_ERROR_ITEM_ID: await seedErrorItem(env.databaseUrl, apiKey),
      CONTRACT_DATABASE_URL: env.databaseUrl,
    };
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
    await env?.dispose();
  }, 60_000);

  it(
    'every documented response passes or is skipped with a reason in hooks.cjs',
    async () => {
      const { code, output } = await runDredd(hooksEnv);

      const problems: string[] = [];
      const summaryLine = /complete: (\d+) passing, (\d+) failing, (\d+) errors, (\d+) skipped, (\d+) total/.exec(
        output,
      );
      const reportLine = /^CONTRACT_HOOKS_REPORT (.*)$/m.exec(output);
      const report = reportLine ? (JSON.parse(reportLine[1]) as HooksReport) : undefined;
      if (code !== 0) problems.push(`Dredd exited with ${code}`);
      if (!summaryLine) problems.push('no Dredd summary line ("complete: N passing, ...") in the output');
      if (!report) problems.push('hooks.cjs printed no CONTRACT_HOOKS_REPORT line (were the hooks loaded?)');
      if (summaryLine && report) {
        const [, passing, failing, errors, skipped, total] = summaryLine.slice(0, 6).map(Number);
        if (failing !== 0 || errors !== 0) problems.push(`Dredd reports ${failing} failing, ${errors} errors`);
        if (skipped !== report.skipped.length) {
          problems.push(`Dredd skipped ${skipped} transactions, hooks.cjs declares ${report.skipped.length}`);
        }
        if (total !== report.total || passing + skipped !== total) {
          problems.push(`${passing} passing + ${skipped} skipped != ${total} total (hooks saw ${report.total})`);
        }
      }
      if (report?.unusedSkipRules.length) {
        problems.push(`skip rules in hooks.cjs that match no transaction: ${report.unusedSkipRules.join(', ')}`);
      }
      if (report?.unknownHookNames.length) {
        problems.push(`hooks for transaction names Dredd does not know: ${report.unknownHookNames.join(', ')}`);
      }

      if (problems.length > 0) {
        throw new Error(
          `${problems.join('\n')}\n\n--- Dredd output ---\n${shortenLongLines(output)}\n` +
            `--- service output ---\n${shortenLongLines(service?.output() ?? '')}`,
        );
      }
      process.stdout.write(
        `${summaryLine![0]}\n${report!.skipped.map(({ name, reason }) => `  skipped: ${name} -- ${reason}\n`).join('')}`,
      );
    },
    DREDD_TIMEOUT_MS + 10_000,
  );
});
