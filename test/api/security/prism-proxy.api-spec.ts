import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { inputsFor } from '../../support/jobs.js';
import { createUserWithKey, freePort, type RunningService, startService } from '../../support/service.js';
import { completeItems } from '../../support/history.js';
import { postJob } from '../../support/client.js';
import { type ResultFile, signedMediaPath } from '../../support/media.js';

/**
 * Every operation, in success and error cases, through `prism proxy`, which checks each live answer against the
 * contract. No upload goes through it (Prism corrupts binary multipart bodies): the jobs read back here were
 * created directly against the service.
 */
const ROOT = fileURLToPath(new URL('../../..', import.meta.url));
const PRISM_START_TIMEOUT_MS = 60_000;
/** Prism's own answers (request violations, and response violations under --errors) have types under this. */
const PRISM_ERROR_TYPE = 'https://stoplight.io/prism/errors#';

interface Prism {
  url: string;
  process: ChildProcess;
  output(): string;
}

async function startPrism(upstream: string, extraArgs: string[]): Promise<Prism> {
  const port = await freePort();
  const child = spawn(
    `${ROOT}node_modules/.bin/prism`,
    ['proxy', 'openapi/openapi.yaml', upstream, '-h', '127.0.0.1', '-p', String(port), '--errors', ...extraArgs],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const deadline = Date.now() + PRISM_START_TIMEOUT_MS;
  while (!output.includes('Prism is listening')) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`prism proxy did not start:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { url: `http://127.0.0.1:${port}`, process: child, output: () => output };
}

async function stopPrism(prism: Prism | undefined): Promise<void> {
  if (!prism || prism.process.exitCode !== null) return;
  const exited = once(prism.process, 'exit');
  prism.process.kill('SIGTERM');
  await exited;
}

interface Case {
  name: string;
  method: string;
  path: string;
  /** The status the service answers. */
  status: number;
  key?: 'user' | 'other' | 'none' | 'wrong';
  json?: unknown;
  body?: { contentType: string; text: string };
}

interface Items {
  /** Complete, the user's. */
  complete: string;
  /** Complete, the user's, deleted by the corpus. */
  deletable: string;
  /** Pending for good (no worker runs any more). */
  pending: string;
}

/** `sign` gives a result's path signed as the service signs it. */
function corpus(items: Items, sign: (id: string, file: ResultFile) => string): Case[] {
  const { complete, deletable, pending } = items;
  const missing = randomUUID();
  const feedback = (id: string) => `/user/generation-history/feedback/${id}`;
  return [
    { name: 'tools', method: 'GET', path: '/generation/tools', status: 200 },
    { name: 'tools without a key', method: 'GET', path: '/generation/tools', status: 401, key: 'none' },
    { name: 'tools with a wrong key', method: 'GET', path: '/generation/tools', status: 401, key: 'wrong' },
    { name: 'types of a tool', method: 'GET', path: '/generation/generationTypes?tool=fashion_swap_half', status: 200 },
    {
      name: 'types of a tool with a text input',
      method: 'GET',
      path: '/generation/generationTypes?tool=default',
      status: 200,
    },
    { name: 'types without a tool', method: 'GET', path: '/generation/generationTypes', status: 400 },
    { name: 'types of an empty tool', method: 'GET', path: '/generation/generationTypes?tool=', status: 400 },
    { name: 'types of an unknown tool', method: 'GET', path: '/generation/generationTypes?tool=hat_swap', status: 404 },
    {
      name: 'types without a key',
      method: 'GET',
      path: '/generation/generationTypes?tool=default',
      status: 401,
      key: 'none',
    },
    {
      name: 'job creation without a key',
      method: 'POST',
      path: '/generation/generate_image_v2/',
      status: 401,
      key: 'none',
    },
    {
      name: 'job creation as JSON',
      method: 'POST',
      path: '/generation/generate_image_v2/',
      status: 400,
      body: { contentType: 'application/json', text: '{"tool":"default"}' },
    },
    { name: 'history', method: 'GET', path: '/user/generation-history', status: 200 },
    {
      name: 'history, filtered',
      method: 'GET',
      path: '/user/generation-history?status=complete&generation_type=product_card&limit=10',
      status: 200,
    },
    { name: 'history past the end', method: 'GET', path: '/user/generation-history?page=999', status: 200 },
    { name: 'history with limit 0', method: 'GET', path: '/user/generation-history?limit=0', status: 400 },
    { name: 'history with limit 101', method: 'GET', path: '/user/generation-history?limit=101', status: 400 },
    {
      name: 'history with an unknown status',
      method: 'GET',
      path: '/user/generation-history?status=done',
      status: 400,
    },
    { name: 'history with page=abc', method: 'GET', path: '/user/generation-history?page=abc', status: 400 },
    { name: 'history without a key', method: 'GET', path: '/user/generation-history', status: 401, key: 'none' },
    { name: 'history with a wrong key', method: 'GET', path: '/user/generation-history', status: 401, key: 'wrong' },
    { name: 'a complete item', method: 'GET', path: `/user/generation-history/${complete}`, status: 200 },
    { name: 'a pending item', method: 'GET', path: `/user/generation-history/${pending}`, status: 200 },
    { name: 'a missing item', method: 'GET', path: `/user/generation-history/${missing}`, status: 404 },
    {
      name: "another user's item",
      method: 'GET',
      path: `/user/generation-history/${complete}`,
      status: 404,
      key: 'other',
    },
    { name: 'an item id that is no UUID', method: 'GET', path: '/user/generation-history/not-a-uuid', status: 400 },
    {
      name: 'an item without a key',
      method: 'GET',
      path: `/user/generation-history/${complete}`,
      status: 401,
      key: 'none',
    },
    { name: 'like', method: 'PATCH', path: feedback(complete), status: 200, json: { like: true } },
    { name: 'dislike', method: 'PATCH', path: feedback(complete), status: 200, json: { like: false } },
    { name: 'clear the feedback', method: 'PATCH', path: feedback(complete), status: 200, json: { like: null } },
    { name: 'feedback of a wrong type', method: 'PATCH', path: feedback(complete), status: 400, json: { like: 'yes' } },
    {
      name: 'feedback with another field',
      method: 'PATCH',
      path: feedback(complete),
      status: 400,
      json: { like: true, stars: 5 },
    },
    { name: 'empty feedback', method: 'PATCH', path: feedback(complete), status: 400, json: {} },
    {
      name: 'feedback that is broken JSON',
      method: 'PATCH',
      path: feedback(complete),
      status: 400,
      body: { contentType: 'application/json', text: '{"like": tru' },
    },
    {
      name: 'feedback as plain text',
      method: 'PATCH',
      path: feedback(complete),
      status: 400,
      body: { contentType: 'text/plain', text: 'like' },
    },
    {
      name: 'feedback over 100 KB',
      method: 'PATCH',
      path: feedback(complete),
      status: 413,
      json: { like: true, padding: 'x'.repeat(200 * 1024) },
    },
    { name: 'feedback on a pending item', method: 'PATCH', path: feedback(pending), status: 409, json: { like: true } },
    { name: 'feedback on a missing item', method: 'PATCH', path: feedback(missing), status: 404, json: { like: true } },
    {
      name: "feedback on another user's item",
      method: 'PATCH',
      path: feedback(complete),
      status: 404,
      json: { like: true },
      key: 'other',
    },
    {
      name: 'feedback on an id that is no UUID',
      method: 'PATCH',
      path: feedback('not-a-uuid'),
      status: 400,
      json: { like: true },
    },
    {
      name: 'feedback without a key',
      method: 'PATCH',
      path: feedback(complete),
      status: 401,
      json: { like: true },
      key: 'none',
    },
    {
      name: 'feedback with a wrong key',
      method: 'PATCH',
      path: feedback(complete),
      status: 401,
      json: { like: true },
      key: 'wrong',
    },
    { name: 'the preview', method: 'GET', path: `/${sign(complete, 'preview.webp')}`, status: 200, key: 'none' },
    { name: 'the stock image', method: 'GET', path: `/${sign(complete, 'stock.jpg')}`, status: 200, key: 'none' },
    { name: 'the stock image by its key', method: 'GET', path: `/media/${complete}/stock.jpg`, status: 200 },
    { name: 'an unsigned media path', method: 'GET', path: `/media/${complete}/stock.jpg`, status: 403, key: 'none' },
    {
      name: "another user's media by their key",
      method: 'GET',
      path: `/media/${complete}/stock.jpg`,
      status: 404,
      key: 'other',
    },
    {
      name: 'media of a missing item',
      method: 'GET',
      path: `/${sign(missing, 'preview.webp')}`,
      status: 404,
      key: 'none',
    },
    {
      name: 'media that is no result file',
      method: 'GET',
      path: `/media/${complete}/input.png`,
      status: 404,
      key: 'none',
    },
    {
      name: "deleting another user's item",
      method: 'DELETE',
      path: `/user/generation-history/${complete}`,
      status: 404,
      key: 'other',
    },
    {
      name: 'deleting without a key',
      method: 'DELETE',
      path: `/user/generation-history/${deletable}`,
      status: 401,
      key: 'none',
    },
    {
      name: 'deleting with a wrong key',
      method: 'DELETE',
      path: `/user/generation-history/${deletable}`,
      status: 401,
      key: 'wrong',
    },
    {
      name: 'deleting an id that is no UUID',
      method: 'DELETE',
      path: '/user/generation-history/not-a-uuid',
      status: 400,
    },
    { name: 'deleting an item', method: 'DELETE', path: `/user/generation-history/${deletable}`, status: 204 },
    { name: 'deleting it again', method: 'DELETE', path: `/user/generation-history/${deletable}`, status: 404 },
    { name: 'reading a deleted item', method: 'GET', path: `/user/generation-history/${deletable}`, status: 404 },
    {
      name: 'media of a deleted item',
      method: 'GET',
      path: `/${sign(deletable, 'stock.jpg')}`,
      status: 404,
      key: 'none',
    },
    { name: 'liveness', method: 'GET', path: '/health/live', status: 200, key: 'none' },
    { name: 'readiness', method: 'GET', path: '/health/ready', status: 200, key: 'none' },
    { name: 'the contract as JSON', method: 'GET', path: '/openapi.json', status: 200, key: 'none' },
    { name: 'the contract as YAML', method: 'GET', path: '/openapi.yaml', status: 200, key: 'none' },
  ];
}

type Verdict = 'answered by the service' | 'refused by Prism' | 'violation';

interface Checked {
  name: string;
  verdict: Verdict;
  status: number;
  detail: string;
}

describe('the contract holds for live traffic through prism proxy', () => {
  let env: TestEnvironment;
  let sut: RunningService;
  let keys: Record<'user' | 'other', string>;
  let items: Items[];
  let validating: Prism | undefined;
  let permissive: Prism | undefined;

  beforeAll(async () => {
    env = await createTestEnvironment();
    sut = await startService({ ...env.serviceEnv, ROLE: 'api' });
    keys = { user: await createUserWithKey(env.databaseUrl), other: await createUserWithKey(env.databaseUrl) };
    const tools = ['fashion_card', 'fashion_card', 'default'];
    const [complete, deletable1, deletable2] = await completeItems(sut.baseUrl, env.serviceEnv, keys.user, tools);
    const pending = await postJob(sut.baseUrl, keys.user, await inputsFor('default'));
    const pendingId = ((await pending.json()) as { history_item_id: string }).history_item_id;
    items = [
      { complete, deletable: deletable1, pending: pendingId },
      { complete, deletable: deletable2, pending: pendingId },
    ];
    // As the issue runs it (Prism refuses requests that break the contract before the service sees them), and
    // with request validation off, so the service's own answers to those requests are checked too. Prism checks
    // the security scheme either way: a request without a key never reaches the service through it.
    [validating, permissive] = await Promise.all([
      startPrism(sut.baseUrl, []),
      startPrism(sut.baseUrl, ['--validate-request=false']),
    ]);
  }, 150_000);

  afterAll(async () => {
    await Promise.all([stopPrism(validating), stopPrism(permissive)]);
    await sut?.stop();
    await env?.dispose();
  }, 60_000);

  async function check(prism: Prism, request: Case): Promise<Checked> {
    const key = request.key ?? 'user';
    // Raw requests through the proxy: the proxy, not the typed client, checks them against the contract.
    const headers: Record<string, string> =
      key === 'none' ? {} : { Authorization: `Bearer ${key === 'wrong' ? 'igs_wrong' : keys[key]}` };
    let body: string | undefined;
    if (request.json !== undefined) {
      headers['Content-Type'] = 'application/json';
      body = JSON.stringify(request.json);
    } else if (request.body) {
      headers['Content-Type'] = request.body.contentType;
      body = request.body.text;
    }
    const response = await fetch(`${prism.url}${request.path}`, { method: request.method, headers, body });
    const text = Buffer.from(await response.arrayBuffer()).toString('latin1');
    let type: unknown;
    try {
      type = (JSON.parse(text) as { type?: unknown }).type;
    } catch {
      type = undefined;
    }
    const violations = response.headers.get('sl-violations');
    const fromPrism = typeof type === 'string' && type.startsWith(PRISM_ERROR_TYPE);
    // The service puts X-Request-Id on every answer; Prism's own answers have none.
    const fromService = response.headers.has('x-request-id');
    let verdict: Verdict;
    if (violations || (fromPrism && (fromService || type === `${PRISM_ERROR_TYPE}VIOLATIONS`))) verdict = 'violation';
    else if (fromPrism) verdict = 'refused by Prism';
    else verdict = 'answered by the service';
    return { name: request.name, verdict, status: response.status, detail: violations ?? text.slice(0, 500) };
  }

  it.each([
    { mode: 'validating requests, as the issue runs it', run: 0 },
    { mode: 'not validating requests, so the service answers broken ones too', run: 1 },
  ])(
    'prism proxy $mode: no violation',
    async ({ mode, run }) => {
      const prism = run === 0 ? validating! : permissive!;
      const requests = corpus(items[run], (id, file) => signedMediaPath(env.serviceEnv, id, file));
      const checked: Checked[] = [];
      for (const request of requests) checked.push(await check(prism, request));

      const count = (verdict: Verdict) => checked.filter((c) => c.verdict === verdict).length;
      process.stdout.write(
        `prism proxy ${mode}: ${checked.length} requests checked, ${count('answered by the service')} answered by ` +
          `the service, ${count('refused by Prism')} refused by Prism itself, ${count('violation')} violations\n` +
          checked
            .filter((c) => c.verdict !== 'answered by the service')
            .map((c) => `  ${c.verdict}: ${c.name} (${c.status})${c.verdict === 'violation' ? ` ${c.detail}` : ''}\n`)
            .join(''),
      );
      expect(checked.filter((c) => c.verdict === 'violation')).toEqual([]);
      for (const [index, result] of checked.entries()) {
        if (result.verdict === 'refused by Prism') {
          // Only requests that break the contract, which the service refuses as well (checked in the other run).
          expect([result.name, requests[index].status >= 400]).toEqual([result.name, true]);
        } else {
          expect([result.name, result.status]).toEqual([result.name, requests[index].status]);
        }
      }
      if (prism === permissive) {
        // Prism checks the security scheme even so: only requests without any key are left to it.
        const refused = requests.filter((_request, index) => checked[index].verdict === 'refused by Prism');
        expect(refused.filter((request) => request.key !== 'none').map((request) => request.name)).toEqual([]);
      }
    },
    60_000,
  );
});
