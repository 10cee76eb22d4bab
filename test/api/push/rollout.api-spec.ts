import { once } from 'node:events';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { type HistoryItem, createClient } from '../../../client/src/index.js';
import { expectMatchesContract } from '../../support/contract.js';
import { type OpenStream, openStream } from '../../support/event-stream.js';
import { cogEngine, createUser, submit, uniqueImage, waitUntil, WorkerWorld } from '../../support/harness.js';
import { rawExchange } from '../../support/raw-http.js';
import { type RoundRobinProxy, startRoundRobinProxy } from '../../support/round-robin-proxy.js';
import type { RunningService } from '../../support/service.js';
import { unsignedItem } from '../../support/media.js';

/** Long enough that the job is still in the engine when the first replica has exited. */
const ENGINE_MS = 5000;
/**
 * Far longer than the kill grace below: a replica that exits before it is killed ended its streams and answered its
 * held requests by itself, rather than being cut off when this ran out.
 */
const API_SETTINGS = { SHUTDOWN_TIMEOUT_MS: '60000', EVENT_STREAM_HEARTBEAT_MS: '300' };
const KILL_GRACE_MS = 10_000;

const portOf = (service: RunningService) => Number(new URL(service.baseUrl).port);
const RECONNECT = { event: 'reconnect', data: {} };
const statusesOf = (stream: OpenStream) =>
  stream.events.map((event) => (event.data as { status?: string }).status ?? event.event);

/**
 * A rollout with streams open, as an operator runs one: two API replicas behind a load balancer, one worker, clients
 * following a job and a history page; each replica in turn gets SIGTERM.
 */
describe('SIGTERM to API replicas with event streams and held requests open', () => {
  let world: WorkerWorld;
  let proxy: RoundRobinProxy;
  let first: RunningService;
  let second: RunningService;
  let worker: RunningService;
  let key: string;

  beforeAll(async () => {
    world = await WorkerWorld.create(() => ({ kind: 'succeed', delayMs: ENGINE_MS }));
    // The first applies the migrations; the others find the schema ready.
    first = await world.processes.start('api', API_SETTINGS);
    [second, worker] = await Promise.all([
      world.processes.start('api', API_SETTINGS),
      world.processes.start('worker', cogEngine(world.fake)),
    ]);
    ({ key } = await createUser(world.env));
    // The second replica joins the balancer once the clients are following: their streams are all on the first.
    proxy = await startRoundRobinProxy([portOf(first)]);
  }, 60_000);

  afterAll(async () => {
    await proxy?.close();
    await world?.dispose();
  }, 60_000);

  it('ends streams with a reconnect event, answers held requests, exits; clients go on with the other replica', async () => {
    const sut = createClient({ baseUrl: proxy.baseUrl, apiKey: key });
    const following = new AbortController();
    const opened: number[] = [];
    const seenByHistory: HistoryItem[] = [];
    const history = sut
      .followHistory({
        signal: following.signal,
        onOpen: () => void opened.push(proxy.connections.at(-1)!.upstream),
        onItem: (item) => seenByHistory.push(item),
      })
      .catch((error: unknown) => error);
    await waitUntil(() => opened.length === 1, 'the history stream to open');
    const id = await submit(first.baseUrl, key, await uniqueImage());
    // Started (its start is a change the streams send): nothing else changes until the engine is done.
    await world.fake.waitFor((fake) => fake.inFlight().length === 1, 'the job in the engine');
    const updates: HistoryItem[] = [];
    const job = sut.waitForJob(id, { onUpdate: (item) => updates.push(item) });
    const userStream = await openStream(`${first.baseUrl}/user/events`, key);
    const itemStream = await openStream(`${first.baseUrl}/user/generation-history/${id}/events`, key);
    const held = fetch(`${first.baseUrl}/user/generation-history/${id}`, {
      headers: { Authorization: `Bearer ${key}`, Prefer: 'wait=60' },
    });
    await waitUntil(
      () => updates.length === 1 && statusesOf(itemStream).length === 1 && userStream.comments > 0,
      'every stream to be open',
    );
    proxy.upstreams.push(portOf(second));

    const code = await world.processes.stop(first, KILL_GRACE_MS);

    expect(code).toBe(0);
    expect(world.fake.requests[0].answered).toBe(false);
    await Promise.all([userStream.ended, itemStream.ended]);
    expect(userStream.events).toEqual([RECONNECT]);
    expect(statusesOf(itemStream)).toEqual(['pending', 'reconnect']);
    expect(itemStream.events.at(-1)).toEqual(RECONNECT);
    const answer = await held;
    expect([answer.status, answer.headers.get('preference-applied')]).toEqual([200, 'wait=60']);
    expect(((await answer.json()) as HistoryItem).status).toBe('pending');

    const final = await job;
    expect(final).toMatchObject({ history_item_id: id, status: 'complete' });
    expect([...new Set(updates.map((item) => item.status))]).toEqual(['pending', 'complete']);
    expect(updates.at(-1)).toEqual(final);
    await waitUntil(() => seenByHistory.some((item) => item.status === 'complete'), 'the history to see it complete');
    expect(opened).toEqual([portOf(first), portOf(second)]);
    // Read at another moment, so signed for another: the same item, its URLs signed afresh.
    expect(unsignedItem(seenByHistory.find((item) => item.status === 'complete')!)).toEqual(unsignedItem(final));

    // The rest of the rollout: the second replica and the worker go too, and every one exits by itself.
    const lastStream = await openStream(`${second.baseUrl}/user/events`, key);
    const stopped = await Promise.all([second, worker].map((service) => world.processes.stop(service, KILL_GRACE_MS)));
    expect(stopped).toEqual([0, 0]);
    await lastStream.ended;
    expect(lastStream.events).toEqual([RECONNECT]);
    following.abort();
    expect(await history).toMatchObject({ name: 'AbortError' });
  }, 90_000);

  it('cuts off a request still running after SHUTDOWN_TIMEOUT_MS, then exits', async () => {
    const sut = await world.processes.start('api', { SHUTDOWN_TIMEOUT_MS: '1000' });
    // An upload that stalls halfway: its request would hold the process as long as the client likes.
    const stalled = connect(portOf(sut), '127.0.0.1');
    await once(stalled, 'connect');
    stalled.write(
      [
        'POST /generation/generate_image_v2/ HTTP/1.1',
        'Host: 127.0.0.1',
        `Authorization: Bearer ${key}`,
        'Content-Type: multipart/form-data; boundary=x',
        'Content-Length: 100000',
        '',
        '--x\r\nContent-Disposition: form-data; name="tool"\r\n\r\nfashion_card\r\n',
      ].join('\r\n'),
    );
    const closed = once(stalled, 'close');

    const code = await world.processes.stop(sut, KILL_GRACE_MS);

    expect(code).toBe(0);
    await closed;
  }, 60_000);

  it('answers readiness with 503 shutting_down while it drains and its worker finishes a job', async () => {
    // ROLE=all: the API drains while the process's worker gives its running job time to finish.
    const sut = await world.processes.start('all', { ...cogEngine(world.fake), SHUTDOWN_TIMEOUT_MS: '20000' });
    await submit(sut.baseUrl, key, await uniqueImage());
    await world.fake.waitFor((fake) => fake.inFlight().length === 1, 'the job in the engine');
    // The probe's headers are still coming when SIGTERM arrives: the server answers it, as it does every request in
    // flight, while it drains.
    const probe = rawExchange({
      port: portOf(sut),
      chunks: [Buffer.from('GET /health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n'), Buffer.from('\r\n')],
      delayMs: 2000,
      then: 'keep-open',
      until: 'response',
      waitMs: 5000,
    });
    await sleep(300);
    const stopped = world.processes.stop(sut, KILL_GRACE_MS);

    const { responses } = await probe;

    expect(responses).toHaveLength(1);
    expect(responses[0].status).toBe(503);
    expect(responses[0].headers.get('connection')).toBe('close');
    const { status, headers, body } = responses[0];
    expect(await expectMatchesContract(new Response(body, { status, headers }), 'GET', '/health/ready')).toMatchObject({
      status: 'shutting_down',
      details: { database: { status: 'up' }, queue: { status: 'up' } },
    });
    expect(await stopped).toBe(0);
  }, 60_000);
});
