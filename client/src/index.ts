/**
 * The typed client of the image generation service, for browsers and Node.js 20.19 or later: types generated from the
 * contract (`npm run gen`), requests through openapi-fetch. Every non-2xx answer is thrown as one {@link ServiceError}.
 */
import createFetchClient, { type Client as FetchClient } from 'openapi-fetch';
import type { components, paths } from './generated/openapi.js';

export type { components, paths };
export type Tool = components['schemas']['Tool'];
export type GenerationType = components['schemas']['GenerationType'];
export type GenerationInput = components['schemas']['GenerationInput'];
export type HistoryItem = components['schemas']['HistoryItem'];
export type HistoryPage = components['schemas']['HistoryPage'];
export type JobAccepted = components['schemas']['JobAccepted'];
export type JobFinished = components['schemas']['JobFinished'];
export type Problem = components['schemas']['Problem'];
export type StoredFile = components['schemas']['StoredFile'];
export type JobRequest = components['schemas']['JobRequest'];
export type Usage = components['schemas']['Usage'];
export type JobMetrics = NonNullable<HistoryItem['metrics']>;
/** A webhook message a job may ask for besides its final state's, which always comes. */
export type WebhookEventName = 'started' | 'progress' | 'completed';
/** One result of a complete job: its media paths and the seed it was made with. */
export type JobOutput = components['schemas']['JobOutput'];
export type JobStatus = HistoryItem['status'];
export type ImageInputName = Exclude<GenerationInput['name'], 'prompt'>;
export type HistoryFilters = NonNullable<paths['/user/generation-history']['get']['parameters']['query']>;

/** An image to upload: a browser File or Blob, or bytes (a Node Buffer is a Uint8Array). */
export type ImageData = Blob | Uint8Array;

export interface ClientOptions {
  /** Where the service is, e.g. `https://images.example.com` (paths are appended to it). */
  baseUrl: string;
  apiKey: string;
  /** A fetch of your own (tests, instrumentation); the global one by default. */
  fetch?: typeof fetch;
}

export interface CreateJobOptions {
  tool: string;
  /** The tool's default when absent. */
  generationType?: string;
  /**
   * By input name: each image's bytes (sent as a multipart upload), or each image named instead (sent as JSON): an
   * `https` URL the service fetches, or the `file_id` of an image stored with `uploadFile`. One job takes one kind.
   */
  images: Partial<Record<ImageInputName, ImageData | string>>;
  /** The `default` tool's optional text. */
  prompt?: string;
  /** Text inputs by name (a configured tool's, as `generationTypes` lists them), beside `prompt`. */
  texts?: Record<string, string>;
  /** HTTPS URL the service POSTs the final item to, signed (see `@igs/client/webhooks`). */
  webhookUrl?: string;
  /**
   * With `webhookUrl`: `started` adds a `generation.started` message, `progress` `generation.progress` ones (at most
   * one a second); the final state's always comes.
   */
  webhookEvents?: WebhookEventName[];
  /**
   * 0 to 2^32 - 1: the same seed and inputs give the same result. A tool whose model takes no seed answers 422
   * `unsupported_option`; absent, the service draws one and shows it on each of the item's `outputs`.
   */
  seed?: number;
  /** How many results (1 to 4, default 1), shown in the item's `outputs`; more than the tool's model makes is a 422. */
  numOutputs?: number;
  /** Makes retries safe: a repeat with the same key answers the first job instead of creating another. */
  idempotencyKey?: string;
  /** Seconds (1 to 60) to hold the answer until the job is final (`Prefer: wait`). */
  wait?: number;
  signal?: AbortSignal;
}

export interface WaitOptions {
  signal?: AbortSignal;
  /**
   * Called with the item each time the client learns of a change, the first state included: its status, or the
   * `progress` of a running job (0 to 1, rising; `null` while the engine has reported nothing; `1` once `complete`,
   * `null` once `error`). From the event stream that is each move, at most twice a second; when waiting falls back to
   * `Prefer: wait` or polling, it is what each answer says.
   */
  onUpdate?: (item: HistoryItem) => void;
}

export interface HistoryEventsOptions {
  /** Stops following; the promise then rejects with the signal's reason. */
  signal: AbortSignal;
  /**
   * Called each time the stream is open: the first time and after every reconnect. List the history here: changes
   * made while no stream was open are not replayed. Events wait until it has settled.
   */
  onOpen?: () => void | Promise<void>;
  /** A new item, or one that changed (its status, or the `progress` of a running job). */
  onItem?: (item: HistoryItem) => void;
  onDeleted?: (historyItemId: string) => void;
}

/** A problem+json answer (or a failure to reach the service), with what a caller branches on. */
export class ServiceError extends Error {
  override readonly name = 'ServiceError';

  constructor(
    /** HTTP status; 0 when the service could not be reached. */
    readonly status: number,
    /** The problem's stable `code` (`rate_limited`, `validation_failed`, ...); `network_error` when unreachable. */
    readonly code: string,
    message: string,
    /** Seconds to wait before retrying, from `Retry-After` (429, 503). */
    readonly retryAfter: number | undefined,
    readonly problem: Problem | undefined,
  ) {
    super(message);
  }
}

const FINAL: readonly JobStatus[] = ['complete', 'error'];
/** The polling schedule the contract asks of clients that can do nothing better: 2 s, 4 s, then every 8 s. */
const POLL_DELAYS_MS = [2000, 4000, 8000];
/** Longest `Prefer: wait` the service honours. */
const MAX_WAIT_SECONDS = 60;
/** How long to wait before opening a stream again when the service named no `retry:` (an EventSource's default). */
const DEFAULT_RETRY_MS = 3000;
/**
 * What a wait is carried through rather than given up for: the service out of reach (0), between replicas or
 * overloaded behind its proxy (502, 503, 504), or asking for time (429).
 */
const TRANSIENT_STATUSES: readonly number[] = [0, 429, 502, 503, 504];
/** The longest wait after a first transient failure (half of each wait is random); each failure in a row doubles it. */
const BACKOFF_FIRST_MS = 1000;
const BACKOFF_LONGEST_MS = 30_000;

export function createClient(options: ClientOptions): Client {
  return new Client(options);
}

export class Client {
  readonly baseUrl: string;
  private readonly http: FetchClient<paths>;
  private readonly fetch: typeof fetch;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    // Looked up at call time: a fetch replaced after the client was made (instrumentation) is still used.
    this.fetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.http = createFetchClient<paths>({
      baseUrl: this.baseUrl,
      fetch: (request) => this.fetch(request),
      headers: { Authorization: `Bearer ${options.apiKey}` },
    });
  }

  /** The tools, in catalogue order. */
  async tools(): Promise<Tool[]> {
    return dataOf(await this.send(() => this.http.GET('/generation/tools')));
  }

  /** A tool's generation types, the default first, each with the inputs it needs. */
  async generationTypes(tool: string): Promise<GenerationType[]> {
    return dataOf(await this.send(() => this.http.GET('/generation/generationTypes', { params: { query: { tool } } })));
  }

  /**
   * Creates a job. Answers `JobAccepted` (status `pending`); with `wait`, `JobFinished` when the job ended within
   * that many seconds.
   */
  async createJob(options: CreateJobOptions): Promise<JobAccepted | JobFinished> {
    const headers: Record<string, string> = {};
    if (options.idempotencyKey !== undefined) headers['Idempotency-Key'] = options.idempotencyKey;
    if (options.wait !== undefined) headers.Prefer = `wait=${options.wait}`;
    const images = Object.entries(options.images).filter(
      (entry): entry is [string, ImageData | string] => entry[1] !== undefined,
    );
    const named = images.filter(([, image]) => typeof image === 'string');
    if (named.length > 0) {
      if (named.length !== images.length) {
        throw new TypeError('A job takes its images as bytes or as URLs and file ids, not both: uploadFile the bytes.');
      }
      const inputs: Record<string, string> = Object.fromEntries(named as [string, string][]);
      if (options.prompt !== undefined) inputs.prompt = options.prompt;
      Object.assign(inputs, options.texts);
      const body: JobRequest = { tool: options.tool, inputs };
      if (options.generationType !== undefined) body.generation_type = options.generationType;
      if (options.webhookUrl !== undefined) body.webhook_url = options.webhookUrl;
      if (options.webhookEvents !== undefined) body.webhook_events = options.webhookEvents;
      if (options.seed !== undefined) body.seed = options.seed;
      if (options.numOutputs !== undefined) body.num_outputs = options.numOutputs;
      return dataOf(
        await this.send(() =>
          this.http.POST('/generation/generate_image_v2/', { body, headers, signal: options.signal }),
        ),
      );
    }
    const form = new FormData();
    form.append('tool', options.tool);
    if (options.generationType !== undefined) form.append('generation_type', options.generationType);
    for (const [name, image] of images) form.append(name, toBlob(image as ImageData), name);
    if (options.prompt !== undefined) form.append('prompt', options.prompt);
    for (const [name, text] of Object.entries(options.texts ?? {})) form.append(name, text);
    if (options.webhookUrl !== undefined) form.append('webhook_url', options.webhookUrl);
    for (const event of options.webhookEvents ?? []) form.append('webhook_events', event);
    if (options.seed !== undefined) form.append('seed', String(options.seed));
    if (options.numOutputs !== undefined) form.append('num_outputs', String(options.numOutputs));
    return dataOf(
      await this.send(() =>
        this.http.POST('/generation/generate_image_v2/', {
          // The contract types binary parts as strings; the form itself is sent, and fetch writes the multipart
          // boundary and each file's part.
          body: {} as never,
          bodySerializer: () => form,
          headers,
          signal: options.signal,
        }),
      ),
    );
  }

  /** Stores an image to name in later jobs by its `file_id`, until its `expires_at`. */
  async uploadFile(image: ImageData, options: { signal?: AbortSignal } = {}): Promise<StoredFile> {
    const form = new FormData();
    form.append('file', toBlob(image), 'file');
    return dataOf(
      await this.send(() =>
        this.http.POST('/files', { body: {} as never, bodySerializer: () => form, signal: options.signal }),
      ),
    );
  }

  /** A stored file's description; a missing, expired or another user's file is a `not_found` ServiceError. */
  async getFile(id: string): Promise<StoredFile> {
    return dataOf(await this.send(() => this.http.GET('/files/{id}', { params: { path: { id } } })));
  }

  /** Deletes a stored file; jobs that named it keep their own copy. */
  async deleteFile(id: string): Promise<void> {
    await this.send(() => this.http.DELETE('/files/{id}', { params: { path: { id } } }));
  }

  /** One item; with `wait` (seconds), answered as soon as it is final or when the wait is over. */
  async item(id: string, options: { wait?: number; signal?: AbortSignal } = {}): Promise<HistoryItem> {
    const headers: Record<string, string> = options.wait ? { Prefer: `wait=${options.wait}` } : {};
    return dataOf(
      await this.send(() =>
        this.http.GET('/user/generation-history/{id}', {
          params: { path: { id } },
          headers,
          signal: options.signal,
        }),
      ),
    );
  }

  /**
   * Waits until the job is `complete` or `error` and answers its final item. Follows the item's event stream, opening
   * it again when the service asks (a replica shutting down ends its streams with a `reconnect` event: the same URL
   * then reaches another, and the new stream starts with the item as it is now); where a stream cannot be had (a proxy
   * that buffers, an old runtime), holds `Prefer: wait` requests; where the service does not hold them, polls every 2,
   * 4, then 8 s. The service out of reach or answering 429, 502, 503 or 504 is waited out (see {@link retrying}), so a
   * restart or a brief outage only delays the answer. Rejects with a refusal (401, 403, 404) as a ServiceError, and
   * with the signal's reason when it is aborted.
   */
  async waitForJob(id: string, options: WaitOptions = {}): Promise<HistoryItem> {
    const { signal } = options;
    const onUpdate = options.onUpdate && changesOnly(options.onUpdate);
    try {
      const final = await this.followEvents(id, signal, onUpdate);
      if (final) return final;
    } catch (error) {
      signal?.throwIfAborted();
      // A refusal is the caller's to see; a stream that broke or could not be had falls back to requests.
      if (error instanceof ServiceError && !isTransient(error)) throw error;
    }
    let polls = 0;
    for (;;) {
      signal?.throwIfAborted();
      const response = await retrying(
        () =>
          this.send(() =>
            this.http.GET('/user/generation-history/{id}', {
              params: { path: { id } },
              headers: { Prefer: `wait=${MAX_WAIT_SECONDS}` },
              signal,
            }),
          ),
        signal,
      );
      const item = dataOf(response);
      onUpdate?.(item);
      if (FINAL.includes(item.status)) return item;
      if (!response.response.headers.has('Preference-Applied')) {
        await sleep(POLL_DELAYS_MS[Math.min(polls++, POLL_DELAYS_MS.length - 1)], signal);
      }
    }
  }

  /**
   * Follows every change of the caller's history (`GET /user/events`) until the signal is aborted, for history pages.
   * Whenever the stream ends (a replica shutting down asks for it with a `reconnect` event, a proxy cuts it, the
   * network fails) it is opened again at the same URL, and `onOpen` runs again so that the caller lists the history
   * afresh; while the service is out of reach or answers 429, 502, 503 or 504 it is tried again (see
   * {@link retrying}). Rejects with the signal's reason, or with a refusal (401, 403) as a ServiceError.
   */
  async followHistory(options: HistoryEventsOptions): Promise<never> {
    const { signal } = options;
    for (;;) {
      const response = await retrying(
        () =>
          this.send(() =>
            this.http.GET('/user/events', { headers: { Accept: 'text/event-stream' }, parseAs: 'stream', signal }),
          ),
        signal,
      );
      const stream: StreamState = {};
      const body = response.response.body;
      try {
        await options.onOpen?.();
        for await (const event of body ? serverSentEvents(body, signal, stream) : []) {
          if (event.type === 'item') options.onItem?.(JSON.parse(event.data) as HistoryItem);
          else if (event.type === 'deleted') {
            options.onDeleted?.((JSON.parse(event.data) as { history_item_id: string }).history_item_id);
          }
        }
      } catch (error) {
        signal.throwIfAborted();
        // A stream cut off midway (a replica gone without a word), or the caller's listing in `onOpen` failing as the
        // service went, is opened again like a stream that ended.
        if (!isTransient(error)) throw error;
      }
      await sleep(stream.retryMs ?? DEFAULT_RETRY_MS, signal);
    }
  }

  /** One page of the caller's history, newest first. */
  async history(filters: HistoryFilters = {}): Promise<HistoryPage> {
    return dataOf(await this.send(() => this.http.GET('/user/generation-history', { params: { query: filters } })));
  }

  /** Every item of the caller's history matching the filters, newest first, fetched a page at a time. */
  async *historyItems(filters: Omit<HistoryFilters, 'page'> = {}): AsyncGenerator<HistoryItem> {
    for (let page = 1; ; page++) {
      const result = await this.history({ ...filters, page });
      yield* result.items;
      if (page >= result.total_pages) return;
    }
  }

  /** Sets (`true` / `false`) or clears (`null`) the feedback on a complete item. */
  async like(id: string, like: boolean | null): Promise<HistoryItem> {
    return dataOf(
      await this.send(() =>
        this.http.PATCH('/user/generation-history/feedback/{id}', { params: { path: { id } }, body: { like } }),
      ),
    );
  }

  /** Deletes an item with its inputs and results. */
  async delete(id: string): Promise<void> {
    await this.send(() => this.http.DELETE('/user/generation-history/{id}', { params: { path: { id } } }));
  }

  /** Ends a pending job as `error` / `canceled`; a job already final is a `not_pending` ServiceError (409). */
  async cancel(id: string): Promise<HistoryItem> {
    return dataOf(
      await this.send(() => this.http.POST('/user/generation-history/{id}/cancel', { params: { path: { id } } })),
    );
  }

  /** The caller's limits, what they use of them now, and their jobs this month by tool. */
  async usage(): Promise<Usage> {
    return dataOf(await this.send(() => this.http.GET('/user/usage')));
  }

  /**
   * The absolute URL of a media path the API returned (`media/<id>/stock.jpg?expires=...&signature=...`): signed, so it
   * needs no key, until the item's `media_urls_expire_at`; read the item again for fresh URLs after that.
   */
  mediaUrl(path: string): string {
    return new URL(path, `${this.baseUrl}/`).href;
  }

  /**
   * The item's event stream, read until it is final, and opened again each time it ends with a `reconnect` event; null
   * when it ended otherwise without a final item.
   */
  private async followEvents(
    id: string,
    signal: AbortSignal | undefined,
    onUpdate: ((item: HistoryItem) => void) | undefined,
  ): Promise<HistoryItem | null> {
    const open = () =>
      this.send(() =>
        this.http.GET('/user/generation-history/{id}/events', {
          params: { path: { id } },
          headers: { Accept: 'text/event-stream' },
          parseAs: 'stream',
          signal,
        }),
      );
    let response = await open();
    for (;;) {
      const body = response.response.body;
      if (!body) return null;
      const stream: StreamState = {};
      let reconnect = false;
      for await (const event of serverSentEvents(body, signal, stream)) {
        if (event.type === 'reconnect') reconnect = true;
        if (event.type !== 'item') continue;
        const item = JSON.parse(event.data) as HistoryItem;
        onUpdate?.(item);
        if (FINAL.includes(item.status)) return item;
      }
      if (!reconnect) return null;
      await sleep(stream.retryMs ?? DEFAULT_RETRY_MS, signal);
      // This service serves streams: the replica that answers next may still be starting (a restart), and is waited
      // for rather than the stream given up for requests.
      response = await retrying(open, signal);
    }
  }

  /** Runs a request, turning an answer that is not 2xx, or a failure to get one, into a ServiceError. */
  private async send<T extends { response: Response; error?: unknown }>(request: () => Promise<T>): Promise<T> {
    let result: T;
    try {
      result = await request();
    } catch (error) {
      if (isAbort(error)) throw error;
      throw unreachable(error);
    }
    const { response } = result;
    if (response.ok) return result;
    const problem = isProblem(result.error) ? result.error : undefined;
    const retryAfter = Number(response.headers.get('Retry-After') ?? Number.NaN);
    throw new ServiceError(
      response.status,
      problem?.code ?? `http_${response.status}`,
      problem?.detail ?? problem?.title ?? `HTTP ${response.status}`,
      Number.isFinite(retryAfter) ? retryAfter : undefined,
      problem,
    );
  }
}

/** The body of a successful answer (`send` has thrown for any other). */
function dataOf<T>(result: { data?: T }): T {
  return result.data as T;
}

/**
 * Passes on an item only when it differs from the last one passed on (a poll that found nothing new, a stream's first
 * event repeating what an earlier answer said).
 */
function changesOnly(onUpdate: (item: HistoryItem) => void): (item: HistoryItem) => void {
  let last: string | undefined;
  return (item) => {
    const seen = JSON.stringify(item);
    if (seen === last) return;
    last = seen;
    onUpdate(item);
  };
}

function toBlob(image: ImageData): Blob {
  return image instanceof Blob ? image : new Blob([image as Uint8Array<ArrayBuffer>]);
}

function isProblem(value: unknown): value is Problem {
  return typeof value === 'object' && value !== null && 'code' in value && 'status' in value;
}

function isAbort(error: unknown): boolean {
  return error instanceof Error && (error.name === 'AbortError' || error.name === 'TimeoutError');
}

function unreachable(cause: unknown): ServiceError {
  return new ServiceError(
    0,
    'network_error',
    `The service could not be reached: ${String(cause)}`,
    undefined,
    undefined,
  );
}

function isTransient(error: unknown): error is ServiceError {
  return error instanceof ServiceError && TRANSIENT_STATUSES.includes(error.status);
}

/**
 * The client's one retry policy: runs `request` until it succeeds, waiting after each transient failure in a row the
 * `Retry-After` the service named, or else twice as long as the time before up to {@link BACKOFF_LONGEST_MS}, half of
 * it at random, so that the clients a stopped replica let go come back spread out rather than all at once. Any other
 * failure is rethrown; the signal's reason once it is aborted.
 */
async function retrying<T>(request: () => Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  for (let failures = 0; ; failures++) {
    try {
      return await request();
    } catch (error) {
      signal?.throwIfAborted();
      if (!isTransient(error)) throw error;
      const backoff = Math.min(BACKOFF_LONGEST_MS, BACKOFF_FIRST_MS * 2 ** failures);
      await sleep(
        error.retryAfter === undefined ? backoff / 2 + (Math.random() * backoff) / 2 : error.retryAfter * 1000,
        signal,
      );
    }
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      signal?.removeEventListener('abort', aborted);
      resolve();
    }
    function aborted(): void {
      clearTimeout(timer);
      reject(signal!.reason as Error);
    }
    signal?.addEventListener('abort', aborted, { once: true });
  });
}

/** What a stream said of itself besides its events: the `retry:` milliseconds to wait before opening it again. */
interface StreamState {
  retryMs?: number;
}

/**
 * The events of a `text/event-stream` body (the fields this service sends: `event`, `data`, and `retry`, kept in
 * `state`).
 */
async function* serverSentEvents(
  body: ReadableStream<Uint8Array>,
  signal: AbortSignal | undefined,
  state: StreamState,
): AsyncGenerator<{ type: string; data: string }> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const stop = () => void reader.cancel(signal?.reason).catch(() => undefined);
  signal?.addEventListener('abort', stop, { once: true });
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read().catch((error: unknown) => {
        throw isAbort(error) ? error : unreachable(error);
      });
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        let type = 'message';
        const data: string[] = [];
        for (const line of block.split('\n')) {
          if (line.startsWith('event:')) type = line.slice(6).trim();
          else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
          // The specification's rule: a value of digits only, or the field is ignored.
          else if (/^retry: ?\d+$/.test(line)) state.retryMs = Number(line.slice(6));
        }
        if (data.length > 0) yield { type, data: data.join('\n') };
      }
    }
  } finally {
    signal?.removeEventListener('abort', stop);
    reader.releaseLock();
    signal?.throwIfAborted();
  }
}
