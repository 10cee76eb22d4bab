import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { PoolSetting, ServerBase } from '../../config/engine-settings.js';
import {
  EngineTimeoutError,
  type Engine,
  type EngineResult,
  type EngineRequest,
  type EngineServer,
  type RunRecord,
} from '../engine.js';
import { ServerUnavailable } from '../remote-http.js';

/** How often `discover: dns` looks its name up again: a new address takes jobs within two of these. */
export const DISCOVERY_INTERVAL_MS = 15_000;
/** A failing server's first time out of the rotation; each failed probe doubles it, up to BACKOFF_MAX_MS. */
export const BACKOFF_BASE_MS = 1000;
export const BACKOFF_MAX_MS = 60_000;
/** One probe's limit. */
const PROBE_TIMEOUT_MS = 5000;

/** The addresses a host name resolves to; injectable so tests need no DNS server. */
export type Resolve = (host: string) => Promise<string[]>;

const resolveByDns: Resolve = async (host) =>
  (await lookup(host, { all: true, verbatim: true })).map(({ address }) => address);

/** One server of a pool, as the slots see it: its address, the jobs it takes, whether it is in the rotation. */
export interface PoolServer {
  readonly name: string;
  readonly capacity: number;
  readonly healthy: boolean;
}

/** What the worker's slots read of a pool: its servers now, and a call whenever they change. */
export interface PoolView {
  servers(): PoolServer[];
  onChange(listener: () => void): () => void;
}

interface Member<Route> {
  url: string;
  served: EngineServer<Route>;
  engines: Map<Route, Engine>;
  /** In the rotation: not failing, or answered its probe since. */
  up: boolean;
  /** Out of the DNS answer: takes no new job, keeps its running ones (and its recorded runs' follow-ups). */
  gone: boolean;
  backoffMs: number;
  probeTimer?: NodeJS.Timeout;
}

/** What a pool keeps in a job's run record: the server, and the engine's own record once it has one. */
interface PooledRun {
  server: string;
  run?: string;
}

/**
 * An engine's pool of model servers (docs/engines.md, "Pools"): `urls`, or every address `discover: dns` finds. A job
 * runs on the server its slot is on (the healthy server with the most free slots, chosen by the slots across every
 * worker), or on the server its run record names, so that a later attempt follows a run left there. A server that
 * refuses connections, times out or answers 5xx is out of the rotation for a backoff (1 s doubling to 60 s), probed
 * (the kind's own health request) and put back when it answers.
 */
export class ServerPool<Route extends object> implements EngineServer<Route>, PoolView {
  private readonly members = new Map<string, Member<Route>>();
  private readonly listeners = new Set<() => void>();
  private discovery?: NodeJS.Timeout;
  private discovering?: Promise<void>;
  private closed = false;

  private readonly resolve: Resolve;

  constructor(
    private readonly setting: ServerBase & PoolSetting,
    private readonly serve: (url: string) => EngineServer<Route>,
    /** For tests: the resolver of `discover: dns` (node:dns's lookup), and how often it is asked. */
    options: { resolve?: Resolve; discoveryIntervalMs?: number } = {},
  ) {
    this.resolve = options.resolve ?? resolveByDns;
    if (setting.discover !== 'dns') {
      for (const url of setting.urls) this.add(url);
      return;
    }
    this.discovering = this.discover();
    const interval = options.discoveryIntervalMs ?? DISCOVERY_INTERVAL_MS;
    this.discovery = setInterval(() => void this.discover(), interval).unref();
  }

  /** Every server that takes new jobs, in the rotation or not. */
  servers(): PoolServer[] {
    return [...this.members.values()]
      .filter((member) => !member.gone)
      .map((member) => ({ name: member.url, capacity: this.setting.concurrency, healthy: member.up }));
  }

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Takes over what the pool this one replaces (a routing file change) knew of its servers: one out of the rotation
   * there stays out here, probed on, rather than failing a job again in every worker.
   */
  inherit(previous: ServerPool<Route>): void {
    for (const member of this.members.values()) {
      const before = previous.members.get(member.url);
      if (!before || before.up) continue;
      member.up = false;
      member.backoffMs = before.backoffMs;
      this.probeLater(member);
    }
  }

  /** Resolves once the first DNS answer is in (at once for `urls`). */
  async ready(): Promise<void> {
    await this.discovering;
  }

  engineFor(route: Route): Engine {
    return { generate: (request) => this.generate(route, request) };
  }

  async abandon(recorded: string): Promise<void> {
    const pooled = decodePooledRun(recorded);
    const member = pooled && this.members.get(pooled.server);
    if (pooled?.run !== undefined) await member?.served.abandon?.(pooled.run);
  }

  /** Up when one of its servers answers. */
  async probe(signal: AbortSignal): Promise<boolean> {
    return Object.values(await this.probeEach(signal)).some(Boolean);
  }

  /**
   * Each server that takes new jobs, up when it answered its probe within the signal's time and is in the rotation
   * (out of it, until its own probe puts it back: a server that answers the probe may still fail its jobs).
   */
  async probeEach(signal: AbortSignal): Promise<Record<string, boolean>> {
    await this.ready();
    const members = [...this.members.values()].filter((member) => !member.gone);
    const answers = await Promise.all(members.map((member) => member.served.probe(signal).catch(() => false)));
    return Object.fromEntries(members.map((member, index) => [member.url, answers[index] && member.up]));
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.discovery);
    for (const member of this.members.values()) clearTimeout(member.probeTimer);
    await Promise.all([...this.members.values()].map((member) => member.served.close()));
  }

  private async generate(route: Route, request: EngineRequest): Promise<EngineResult> {
    await this.ready();
    const recorded = decodePooledRun(await request.runs?.recall());
    const followed = recorded && this.members.get(recorded.server);
    // The slot is taken before the engine starts, as the engine is that of the server the slot is on. A run left on a
    // server still up is followed there, wherever the slot is (its own slot lapsed): that server is busy with it.
    let onSlot = await request.slot?.take();
    // Each worker sees the rotation from its own failures and probes, and another may hand this job a slot on a server
    // this one took out of it: that slot goes back, and the job waits for one again, handed out by this worker's view
    // of the pool or by another's (which takes that server out once one of its own jobs fails there). Run elsewhere
    // without its slot, the job would find that server busy.
    while (request.slot && onSlot !== undefined && !followed?.up && !this.inRotation(onSlot)) {
      await request.slot.free();
      onSlot = await request.slot.take();
    }
    let member = followed?.up ? followed : this.members.get(onSlot ?? '');
    if (!member || (member !== followed && !this.inRotation(member.url))) member = this.anyUp();
    if (!member) throw new ServerUnavailable(`no server of ${this.setting.name} is in the rotation`);
    // Not waited for, as the slot is held: the record's commands go over one connection in order, so the engine's own
    // record comes after it. A record not kept costs only the follow-up of a run left behind.
    if (member !== followed)
      void request.runs?.remember(encodePooledRun({ server: member.url })).catch(() => undefined);
    let engine = member.engines.get(route);
    if (!engine) {
      engine = member.served.engineFor(route);
      member.engines.set(route, engine);
    }
    try {
      return await engine.generate({ ...request, runs: request.runs && pooledRuns(request.runs, member.url) });
    } catch (error) {
      if (!request.signal?.aborted && (error instanceof ServerUnavailable || error instanceof EngineTimeoutError)) {
        this.failed(member);
      }
      throw error;
    }
  }

  private inRotation(server: string | undefined): boolean {
    const member = this.members.get(server ?? '');
    return member !== undefined && member.up && !member.gone;
  }

  /** A server in the rotation, for a job without a slot: the first, as the slots choose for the others. */
  private anyUp(): Member<Route> | undefined {
    return [...this.members.values()].find((member) => member.up && !member.gone);
  }

  private failed(member: Member<Route>): void {
    if (!member.up || this.closed) return;
    member.up = false;
    member.backoffMs = BACKOFF_BASE_MS;
    this.changed();
    this.probeLater(member);
  }

  private probeLater(member: Member<Route>): void {
    clearTimeout(member.probeTimer);
    member.probeTimer = setTimeout(() => void this.probeMember(member), member.backoffMs).unref();
  }

  private async probeMember(member: Member<Route>): Promise<void> {
    const up = await member.served.probe(AbortSignal.timeout(PROBE_TIMEOUT_MS)).catch(() => false);
    if (this.closed || this.members.get(member.url) !== member) return;
    if (up) {
      member.up = true;
      this.changed();
      return;
    }
    member.backoffMs = Math.min(member.backoffMs * 2, BACKOFF_MAX_MS);
    this.probeLater(member);
  }

  private add(url: string): void {
    const existing = this.members.get(url);
    if (existing) {
      existing.gone = false;
      return;
    }
    this.members.set(url, { url, served: this.serve(url), engines: new Map(), up: true, gone: false, backoffMs: 0 });
  }

  /** The name's addresses now; one no longer among them is gone, one new is added; a failed lookup changes nothing. */
  private async discover(): Promise<void> {
    const base = new URL(this.setting.url);
    const host = base.hostname.replace(/^\[(.*)\]$/, '$1');
    let addresses: string[];
    try {
      addresses = isIP(host) ? [host] : await this.resolve(host);
    } catch {
      return;
    }
    if (this.closed || addresses.length === 0) return;
    const urls = new Set(addresses.map((address) => withHost(base, address)));
    const before = JSON.stringify(this.servers());
    for (const url of urls) this.add(url);
    for (const member of this.members.values()) member.gone = !urls.has(member.url);
    if (JSON.stringify(this.servers()) !== before) this.changed();
  }

  private changed(): void {
    for (const listener of this.listeners) listener();
  }
}

/** The URL with its host replaced by an address, without a trailing slash: a server's name. */
function withHost(base: URL, address: string): string {
  const url = new URL(base.href);
  url.hostname = isIP(address) === 6 ? `[${address}]` : address;
  return url.href.replace(/\/+$/, '');
}

/** The job's run record as one server's engine sees it: the engine's own record, kept with the server's address. */
function pooledRuns(runs: RunRecord, server: string): RunRecord {
  return {
    recall: async () => {
      const pooled = decodePooledRun(await runs.recall());
      return pooled?.server === server ? pooled.run : undefined;
    },
    remember: (run) => runs.remember(encodePooledRun({ server, run })),
    forget: () => runs.forget(),
  };
}

function encodePooledRun(run: PooledRun): string {
  return JSON.stringify({ pool: run });
}

/** A record kept by a pool; an engine's own record (kept before the engine was a pool) is none. */
function decodePooledRun(recorded: string | undefined): PooledRun | undefined {
  if (recorded === undefined) return undefined;
  try {
    const { pool } = JSON.parse(recorded) as { pool?: Partial<PooledRun> };
    if (typeof pool?.server !== 'string') return undefined;
    return { server: pool.server, run: typeof pool.run === 'string' ? pool.run : undefined };
  } catch {
    return undefined;
  }
}
