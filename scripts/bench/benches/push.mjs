/**
 * push: how soon a client knows a job ended, and what idle event streams cost.
 *
 * 1. Completion-to-client latency: from the worker's commit (the item's `completed_at`, written by the update that
 *    completes it) to the client holding the final item, for an event stream, `Prefer: wait`, and the seed's
 *    polling at 2 s, 4 s, 8 s. ROLE=api and ROLE=worker run as separate processes, so every change crosses the Redis
 *    fan-out. One fashion_card job per method every 400 ms.
 * 2. Idle event streams: 2,000 `GET /user/events` streams held open on one API process; its RSS growth, and its item
 *    GET throughput with them open against without (alternating rounds).
 */
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import pg from 'pg';
import {
  alternateLoads,
  createBenchEnv,
  createUserWithKey,
  fmtMb,
  fmtMs,
  keepAliveAgent,
  log,
  makePhoto,
  multipartBody,
  NO_LIMITS,
  postJob,
  record,
  requestJson,
  rssKb,
  sleep,
  summarize,
} from '../lib.mjs';

const ROUNDS = 20;
const ROUND_INTERVAL_MS = 400;
const POLL_DELAYS_MS = [2000, 4000, 8000, 8000, 8000];
const STREAMS = 2000;
const STREAM_USERS = 100;
const GET_CONNECTIONS = 50;
const GET_DURATION_MS = 4000;

export const description =
  'completion-to-client latency (event stream, Prefer: wait, 2/4/8 s polling; API and worker apart) and 2,000 idle event streams on one API process';

export async function run() {
  const env = await createBenchEnv();
  const agent = keepAliveAgent(64);
  try {
    // The receiver is on loopback and speaks plain http: the development allowances.
    const limits = {
      ...NO_LIMITS,
      WEBHOOK_ALLOW_HTTP: 'true',
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      RECONCILE_INTERVAL_MS: '200',
    };
    const api = await env.startService({ ROLE: 'api', ...limits });
    await env.startService({ ROLE: 'worker', ...limits });
    const { authorization } = await createUserWithKey(env.databaseUrl, 'bench-push');
    const receiver = await startReceiver();
    const clothes = await makePhoto('clothes', 512, 512);
    const form = multipartBody({ tool: 'fashion_card', clothes: { data: clothes, filename: 'clothes.jpg' } });
    const hookedForm = multipartBody({
      tool: 'fashion_card',
      clothes: { data: clothes, filename: 'clothes.jpg' },
      webhook_url: receiver.url,
    });
    const submit = async (body = form) => {
      const post = await postJob(agent, api.baseUrl, authorization, body);
      if (post.status !== 202) throw new Error(`POST ${post.status} ${post.body}`);
      return post.json.history_item_id;
    };
    const itemUrl = (id) => `${api.baseUrl}/user/generation-history/${id}`;
    /** Milliseconds from the commit that ended the job to now, the moment the client has the final item. */
    const sinceCommit = (item) => Date.now() - Date.parse(item.completed_at);

    const methods = {
      'event stream': (id) => finalEventOf(`${itemUrl(id)}/events`, authorization),
      webhook: async (id) => {
        const { receivedAt, body } = await receiver.next(id);
        return receivedAt - Date.parse(body.data.completed_at);
      },
      'Prefer: wait': async (id) => {
        const got = await requestJson(agent, {
          url: itemUrl(id),
          headers: { Authorization: authorization, Prefer: 'wait=30' },
        });
        if (got.json?.status !== 'complete') throw new Error(`Prefer: wait answered ${got.status} ${got.body}`);
        return sinceCommit(got.json);
      },
      'polling 2/4/8 s': async (id) => {
        for (const delay of POLL_DELAYS_MS) {
          await sleep(delay);
          const got = await requestJson(agent, { url: itemUrl(id), headers: { Authorization: authorization } });
          if (got.json?.status === 'complete') return sinceCommit(got.json);
        }
        throw new Error(`job ${id} not complete after polling`);
      },
    };

    // Warm-up: the worker's engine threads compile their pipelines, the API its fan-out connection.
    for (let i = 0; i < 4; i++) await methods['event stream'](await submit());

    const latencies = Object.fromEntries(Object.keys(methods).map((name) => [name, []]));
    const rounds = [];
    for (let round = 0; round < ROUNDS; round++) {
      rounds.push(
        ...Object.entries(methods).map(async ([name, follow]) =>
          latencies[name].push(await follow(await submit(name === 'webhook' ? hookedForm : form))),
        ),
      );
      await sleep(ROUND_INTERVAL_MS);
    }
    await Promise.all(rounds);
    const targets = {
      'event stream': { op: '<=', value: 15, text: '<= 15 ms' },
      'Prefer: wait': { op: '<=', value: 20, text: '<= 20 ms' },
      webhook: { op: '<=', value: 50, text: '<= 50 ms' },
    };
    for (const [name, values] of Object.entries(latencies)) {
      const summary = summarize(values);
      log(
        `  ${name.padEnd(16)} commit-to-client p50 ${fmtMs(summary.p50)} p90 ${fmtMs(summary.p90)} max ${fmtMs(summary.max)} (${summary.n} jobs)`,
      );
      record(
        'push',
        `completion-to-client p50, ${name}`,
        summary.p50,
        `${fmtMs(summary.p50)} (p90 ${fmtMs(summary.p90)})`,
        targets[name],
      );
    }
    await webhookThroughput(env, receiver);
    await api.stop();
    await receiver.close();

    await idleStreams(env);
  } finally {
    agent.destroy();
    await env.dispose();
  }
}

/**
 * Opens an event stream and resolves with the moment its final item arrived (parsed as it arrives: the stream's end
 * comes after), in milliseconds since the commit that ended the job.
 */
function finalEventOf(url, authorization) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: { Authorization: authorization }, agent: false }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`stream answered ${res.statusCode}`));
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        text += chunk;
        let end;
        while ((end = text.indexOf('\n\n')) >= 0) {
          const data = /^data: (.*)$/m.exec(text.slice(0, end));
          text = text.slice(end + 2);
          const item = data && JSON.parse(data[1]);
          if (item?.status === 'complete') return resolve(Date.now() - Date.parse(item.completed_at));
        }
      });
      res.on('end', () => reject(new Error('stream ended without the final item')));
    });
    req.on('error', reject);
  });
}

async function idleStreams(env) {
  const api = await env.startService({ ROLE: 'api' });
  const users = [];
  for (let i = 0; i < STREAM_USERS; i++) users.push(await createUserWithKey(env.databaseUrl));
  // Items to GET: one of the first user's, read back through the API (its own row, pending forever: no worker).
  const { authorization } = users[0];
  const photo = await makePhoto('clothes', 256, 256);
  const form = multipartBody({ tool: 'fashion_card', clothes: { data: photo, filename: 'clothes.jpg' } });
  const post = await postJob(undefined, api.baseUrl, authorization, form);
  const id = post.json.history_item_id;
  const target = {
    url: `${api.baseUrl}/user/generation-history/${id}`,
    headers: { Authorization: authorization },
  };

  const before = await alternateLoads(
    { without: { target, pid: api.pid } },
    { rounds: 2, concurrency: GET_CONNECTIONS, durationMs: GET_DURATION_MS, warmupMs: 2000 },
  );
  await sleep(1000);
  const rssBefore = rssKb(api.pid);
  const streams = [];
  for (let i = 0; i < STREAMS; i++)
    streams.push(openIdle(`${api.baseUrl}/user/events`, users[i % STREAM_USERS].authorization));
  await Promise.all(streams.map((stream) => stream.opened));
  await sleep(3000);
  const rssWith = rssKb(api.pid);
  const after = await alternateLoads(
    { with: { target, pid: api.pid } },
    { rounds: 2, concurrency: GET_CONNECTIONS, durationMs: GET_DURATION_MS, warmupMs: 1000 },
  );
  const open = streams.filter((stream) => !stream.closed()).length;
  for (const stream of streams) stream.close();
  const growth = rssWith - rssBefore;
  const ratio = after.with.rps / before.without.rps;
  log(
    `  ${STREAMS} streams (${open} still open after the loads): RSS ${fmtMb(rssBefore)} -> ${fmtMb(rssWith)}, item GET ${before.without.rps.toFixed(0)} -> ${after.with.rps.toFixed(0)} req/s`,
  );
  record('push', `API RSS growth with ${STREAMS} idle event streams`, growth / 1024, fmtMb(growth), {
    op: '<=',
    value: 150,
    text: '<= 150 MB',
  });
  record(
    'push',
    `item GET req/s with ${STREAMS} streams open / without`,
    ratio,
    `${ratio.toFixed(2)} (${after.with.rps.toFixed(0)} / ${before.without.rps.toFixed(0)})`,
    { op: '>=', value: 0.8, text: '>= 0.8' },
  );
  await api.stop();
}

/** An event stream held open and never read from, as an idle browser tab holds one. */
function openIdle(url, authorization) {
  let closed = false;
  let req;
  const opened = new Promise((resolve, reject) => {
    req = http.get(url, { headers: { Authorization: authorization }, agent: false }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`stream answered ${res.statusCode}`));
      res.on('data', () => {});
      res.on('close', () => (closed = true));
      resolve();
    });
    req.on('error', (error) => {
      closed = true;
      reject(error);
    });
  });
  return { opened, closed: () => closed, close: () => req.destroy() };
}

/**
 * A webhook receiver on loopback that answers 200 at once and keeps, per item, when its message arrived. (The
 * signature is verified by the tests; here only the timing matters.)
 */
async function startReceiver() {
  const arrivals = new Map();
  const waiters = new Map();
  const server = http.createServer((request, response) => {
    let text = '';
    request.setEncoding('utf8');
    request.on('data', (chunk) => (text += chunk));
    request.on('end', () => {
      const receivedAt = Date.now();
      response.writeHead(200).end();
      const body = JSON.parse(text);
      const arrival = { receivedAt, body };
      arrivals.set(body.data.history_item_id, arrival);
      waiters.get(body.data.history_item_id)?.(arrival);
    });
  });
  server.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/hooks`,
    arrivals,
    next: (id) => (arrivals.has(id) ? arrivals.get(id) : new Promise((resolve) => waiters.set(id, resolve))),
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/**
 * Deliveries a second one worker sustains: messages of ended items put in the outbox (the items' rows) at once, queued
 * by the worker's reconciler and delivered to the loopback receiver; from the first arrival to the last.
 */
async function webhookThroughput(env, receiver) {
  const count = 1000;
  const db = new pg.Client({ connectionString: env.databaseUrl });
  await db.connect();
  const ids = Array.from({ length: count }, () => randomUUID());
  try {
    await db.query(
      `INSERT INTO history_items (id, user_id, tool, generation_type, status, inputs, completed_at, webhook_url, webhook_state)
       SELECT item.id, users.id, 'fashion_card', 'product_card', 'complete', '{}', now() - interval '1 minute', $2, 'pending'
         FROM unnest($1::uuid[]) AS item (id), users WHERE users.name = 'bench-push'`,
      [ids, receiver.url],
    );
  } finally {
    await db.end();
  }
  const arrivals = await Promise.all(ids.map((id) => receiver.next(id)));
  const times = arrivals.map((arrival) => arrival.receivedAt).sort((a, b) => a - b);
  const perSecond = (count - 1) / ((times.at(-1) - times[0]) / 1000);
  log(`  ${count} webhook messages delivered by one worker in ${((times.at(-1) - times[0]) / 1000).toFixed(1)} s`);
  record('push', 'webhook deliveries a second, one worker, loopback receiver', perSecond, `${perSecond.toFixed(0)}/s`);
}
