import https from 'node:https';
import { isIP } from 'node:net';
import { Readable } from 'node:stream';
import sharp, { type Metadata } from 'sharp';
import { IMAGE_MIME_TYPES, imageFormatOf } from '../common/image-format.js';
import { isPrivateAddress, publicOnlyLookup, RefusedAddress } from '../common/network-policy.js';
import { EngineTimeoutError, PermanentEngineError, TransientEngineError } from './engine.js';

/**
 * HTTP as every remote engine speaks it (ENGINES.md, "All kinds"): one request has a time limit and a size limit on
 * its answer; unreachable, 5xx, 429, 409, 408 and a request's timeout are tried again (3 attempts in all, with
 * backoff); other statuses are the model server refusing the job. Outputs are downloaded only from the server's own
 * origin, or over https from a public address (the webhooks' rules).
 */

/** Cut for model error text and error bodies quoted in failure messages. */
const QUOTE_MAX_CHARS = 300;
/** Error bodies are read only this far (they are quoted, truncated, in the message). */
const ERROR_BODY_MAX_BYTES = 64 * 1024;
/** Attempts of one request before its failure is the job attempt's failure. */
export const REQUEST_ATTEMPTS = 3;
const RETRY_BASE_DELAY_MS = 250;
/** Redirects an output's download follows, each one's target judged as the output's URL is. */
const MAX_REDIRECTS = 5;
const REDIRECT_STATUSES: ReadonlySet<number> = new Set([301, 302, 303, 307, 308]);

/**
 * The server itself failed (unreachable, reset, or 5xx), not the request: a pool takes it out of the rotation. A busy
 * server (409, 429) is not one.
 */
export class ServerUnavailable extends TransientEngineError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ServerUnavailable';
  }
}

export interface RemoteHttpOptions {
  /** The server's base URL; paths are resolved under it. */
  baseUrl: string;
  /** Sent with every request to the server (not with downloads from elsewhere). */
  headers: Readonly<Record<string, string>>;
  /** One request's limit: connecting, sending and reading the answer. */
  requestTimeoutMs: number;
  /** Largest output image accepted, in bytes. */
  maxOutputBytes: number;
  /** Largest output image accepted, in pixels. */
  maxOutputPixels: number;
  /** Shortest side of an output image accepted. */
  minOutputSide: number;
  /** Names the server in messages: "Cog", "ComfyUI". */
  what: string;
}

export interface RemoteRequest {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** Under the base URL, e.g. `/predictions/123`. */
  path: string;
  /** JSON-encoded unless a Buffer (sent as it is, with `contentType`) or FormData. */
  body?: unknown;
  contentType?: string;
  headers?: Record<string, string>;
  /** Largest answer read (default 1 MiB). */
  maxBytes?: number;
  signal?: AbortSignal;
  /** Retry transient failures (default true). Off for requests that must not be repeated blindly. */
  retry?: boolean;
  /** Failed statuses the caller reads as an answer (e.g. a validation error whose body names the input). */
  answerStatuses?: readonly number[];
}

/** A model server's HTTP API, with the limits and retries every kind shares. */
export class RemoteHttp {
  readonly base: URL;

  constructor(private readonly options: RemoteHttpOptions) {
    this.base = new URL(options.baseUrl.replace(/\/+$/, '') + '/');
  }

  /**
   * The output is a JPEG, PNG or WebP image sharp can read, no side of it shorter than an upload's may be, or the model
   * failed the job: a model that answers a 1x1 image has not made a result. Its pixels are bounded by OUTPUT_MAX_PIXELS,
   * read from its header before it is decoded; its longest side is not: an upscaler's may well pass an upload's.
   */
  async verifyImage(data: Buffer): Promise<void> {
    const { what, minOutputSide, maxOutputPixels } = this.options;
    let metadata: Metadata;
    try {
      metadata = await sharp(data).metadata();
    } catch {
      throw engineFailed(`${what} output is not an image (${data.length} bytes sharp cannot read)`);
    }
    const { format, width, height } = metadata;
    if (format !== 'jpeg' && format !== 'png' && format !== 'webp') {
      throw engineFailed(`${what} output is a ${format ?? 'unknown'} image, expected JPEG, PNG or WebP`);
    }
    if (Math.min(width, height) < minOutputSide) {
      throw engineFailed(
        `${what} output is ${width}x${height} px; each side must be at least ${minOutputSide} px`,
        `The model made a ${width}x${height} px image, which is no result.`,
      );
    }
    if (width * height > maxOutputPixels) {
      throw engineFailed(
        `${what} output is ${width}x${height} px, more than the ${maxOutputPixels} pixels OUTPUT_MAX_PIXELS allows`,
        `The model made a ${width}x${height} px image, larger than this service takes.`,
      );
    }
  }

  url(path: string): URL {
    return new URL(path.replace(/^\/+/, ''), this.base);
  }

  /** The answer's body; a failed status is a mapped error (transient or permanent), tried again when transient. */
  async request(request: RemoteRequest): Promise<{ status: number; body: Buffer }> {
    const attempts = request.retry === false ? 1 : REQUEST_ATTEMPTS;
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.once(request);
      } catch (error) {
        if (!(error instanceof TransientEngineError) || attempt >= attempts) throw error;
        await sleep(RETRY_BASE_DELAY_MS * 2 ** (attempt - 1), request.signal);
      }
    }
  }

  /** The answer parsed as JSON; an answer that is not JSON is the server failing the job. */
  async json<T>(request: RemoteRequest): Promise<T> {
    const { body } = await this.request(request);
    try {
      return JSON.parse(body.toString('utf8')) as T;
    } catch {
      throw engineFailed(`${this.options.what} answered ${request.method} ${request.path} with something not JSON`);
    }
  }

  /**
   * An output image at `url` (a URL the server gave), read up to the output limit: from the server's own origin (with
   * its headers), or from elsewhere (without them) only over https and from a public address, checked on the address
   * connected to; so a model's answer cannot point the worker at a private network or a cloud's metadata service.
   * Redirects are followed a few times, each target judged the same way.
   */
  async download(url: string, signal?: AbortSignal): Promise<Buffer> {
    let target: URL;
    try {
      target = new URL(url, this.base);
    } catch {
      throw engineFailed(`${this.options.what} output '${quote(url, 80)}' is not a URL`);
    }
    for (let redirects = 0; ; redirects++) {
      const response = await this.downloadOnce(target, signal);
      if (!REDIRECT_STATUSES.has(response.status)) {
        return readBody(response, this.options.maxOutputBytes, () =>
          engineFailed(`${this.options.what} output is larger than the ${this.options.maxOutputBytes} bytes allowed`),
        );
      }
      await response.body?.cancel().catch(() => undefined);
      const location = response.headers.get('location');
      if (redirects >= MAX_REDIRECTS || location === null) {
        throw engineFailed(
          `${this.options.what} output ${describeUrl(target)} redirects ${location === null ? 'nowhere' : `more than ${MAX_REDIRECTS} times`}`,
        );
      }
      try {
        target = new URL(location, target);
      } catch {
        throw engineFailed(
          `${this.options.what} output ${describeUrl(target)} redirects to '${quote(location, 80)}', not a URL`,
        );
      }
    }
  }

  /** One GET of an output, tried again when it fails transiently; a redirect is the answer, not followed. */
  private async downloadOnce(target: URL, signal: AbortSignal | undefined): Promise<Response> {
    const own = target.origin === this.base.origin;
    if (!own && target.protocol !== 'https:') {
      throw engineFailed(`${this.options.what} output ${describeUrl(target)} is neither on its server nor https`);
    }
    const headers = {
      Accept: 'image/jpeg, image/png, image/webp, image/*;q=0.8',
      ...(own ? this.options.headers : {}),
    };
    for (let attempt = 1; ; attempt++) {
      try {
        const { response } = await this.fetchOnce(
          target,
          { method: 'GET', headers, redirect: 'manual' },
          signal,
          'download',
          [...REDIRECT_STATUSES],
          own ? fetch : publicGet,
        );
        return response;
      } catch (error) {
        if (!(error instanceof TransientEngineError) || attempt >= REQUEST_ATTEMPTS) throw error;
        await sleep(RETRY_BASE_DELAY_MS * 2 ** (attempt - 1), signal);
      }
    }
  }

  private async once(request: RemoteRequest): Promise<{ status: number; body: Buffer }> {
    const headers: Record<string, string> = { Accept: 'application/json', ...this.options.headers, ...request.headers };
    let body: RequestInit['body'];
    if (request.body instanceof FormData) body = request.body;
    else if (Buffer.isBuffer(request.body)) {
      body = request.body;
      headers['Content-Type'] = request.contentType ?? 'application/json';
    } else if (request.body !== undefined) {
      body = JSON.stringify(request.body);
      headers['Content-Type'] = 'application/json';
    }
    const { response } = await this.fetchOnce(
      this.url(request.path),
      { method: request.method, headers, body },
      request.signal,
      `${request.method} ${request.path}`,
      request.answerStatuses,
    );
    const data = await readBody(response, request.maxBytes ?? 1024 * 1024, () =>
      engineFailed(`${this.options.what} answer to ${request.method} ${request.path} is too large`),
    );
    return { status: response.status, body: data };
  }

  /**
   * One exchange under its own time limit and the caller's signal; a failed status is mapped to an error. A caller's
   * abort comes out as the signal's reason.
   */
  private async fetchOnce(
    url: URL,
    init: RequestInit,
    callerSignal: AbortSignal | undefined,
    what: string,
    answerStatuses: readonly number[] = [],
    send: (url: URL, init: RequestInit) => Promise<Response> = fetch,
  ): Promise<{ response: Response }> {
    const timeout = AbortSignal.timeout(this.options.requestTimeoutMs);
    const signal = callerSignal ? AbortSignal.any([timeout, callerSignal]) : timeout;
    const label = `${this.options.what} ${what} (${describeUrl(url)})`;
    try {
      const response = await send(url, { ...init, signal });
      if (!response.ok && !answerStatuses.includes(response.status)) {
        const detail = errorDetail(await readBody(response, ERROR_BODY_MAX_BYTES, () => undefined));
        throw httpError(response.status, label, detail);
      }
      return { response };
    } catch (error) {
      if (callerSignal?.aborted) throw callerSignal.reason;
      if (error instanceof PermanentEngineError || error instanceof TransientEngineError) throw error;
      if (error instanceof RefusedAddress) {
        throw engineFailed(
          `${label} refused: ${error.message} (an output not on the model server must be on a public address)`,
        );
      }
      if (timeout.aborted) {
        throw new EngineTimeoutError(`${label} timed out after ${this.options.requestTimeoutMs} ms`, { cause: error });
      }
      throw new ServerUnavailable(`${label} failed: ${networkErrorCode(error)}`, { cause: error });
    }
  }
}

/**
 * A GET over https that connects to public addresses only (src/common/network-policy.ts: no loopback, private,
 * link-local or metadata address, checked on the address connected to) and follows no redirect, as a Response. Not
 * fetch: it cannot be told which addresses it may connect to.
 */
function publicGet(url: URL, init: RequestInit): Promise<Response> {
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  // An address written in the URL is connected to without a lookup: it is checked here instead.
  if (isIP(host) !== 0 && isPrivateAddress(host))
    return Promise.reject(new RefusedAddress(`${host} is a private address`));
  return new Promise((resolve, reject) => {
    const request = https.request(
      url,
      {
        method: 'GET',
        headers: Object.fromEntries(new Headers(init.headers)),
        lookup: publicOnlyLookup,
        signal: init.signal ?? undefined,
      },
      (response) => {
        const headers = new Headers();
        for (const [name, value] of Object.entries(response.headers)) {
          for (const one of Array.isArray(value) ? value : value === undefined ? [] : [value])
            headers.append(name, one);
        }
        const status = response.statusCode ?? 0;
        const empty = status === 204 || status === 205 || status === 304;
        if (empty) response.resume();
        const body = empty ? null : (Readable.toWeb(response) as ReadableStream<Uint8Array>);
        resolve(new Response(body, { status, headers }));
      },
    );
    request.once('error', reject);
    request.end();
  });
}

/** An HTTP status other than 2xx: the server is busy or down (try again), or refuses the request (the job fails). */
export function httpError(status: number, what: string, detail: string): Error {
  const message = `${what} answered HTTP ${status}${detail ? `: ${detail}` : ''}`;
  if (status >= 500) return new ServerUnavailable(message);
  if (status === 408 || status === 409 || status === 429) return new TransientEngineError(message);
  return engineFailed(message);
}

/** Read a body up to `maxBytes`; past that, cancel it and throw `tooLarge()` (or return the bytes read so far). */
export async function readBody(
  response: Response,
  maxBytes: number,
  tooLarge: () => Error | undefined,
): Promise<Buffer> {
  const declared = Number(response.headers.get('content-length') ?? '');
  if (Number.isFinite(declared) && declared > maxBytes) {
    const error = tooLarge();
    if (error) {
      await response.body?.cancel().catch(() => undefined);
      throw error;
    }
  }
  if (!response.body) return Buffer.alloc(0);
  const reader: ReadableStreamDefaultReader<Uint8Array> = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (total + value.byteLength > maxBytes) {
        const error = tooLarge();
        if (error) throw error;
        chunks.push(value.subarray(0, maxBytes - total));
        total = maxBytes;
        await reader.cancel().catch(() => undefined);
        break;
      }
      chunks.push(value);
      total += value.byteLength;
    }
  } catch (error) {
    await reader.cancel().catch(() => undefined);
    throw error;
  }
  return Buffer.concat(chunks, total);
}

/** A short, safe summary of an error body: FastAPI/pydantic `detail` entries without their echoed input values. */
export function errorDetail(raw: Buffer): string {
  const text = raw.toString('utf8');
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return quote(text);
  }
  if (typeof parsed === 'object' && parsed !== null) {
    const record = parsed as Record<string, unknown>;
    const detail = record['detail'];
    if (Array.isArray(detail)) {
      return quote(
        detail
          .map((item: unknown) => {
            if (typeof item !== 'object' || item === null) return typeof item === 'string' ? item : '';
            const { loc, msg } = item as { loc?: unknown; msg?: unknown };
            const where = Array.isArray(loc) ? loc.join('.') : '';
            return `${where}${where && typeof msg === 'string' ? ': ' : ''}${typeof msg === 'string' ? msg : ''}`;
          })
          .filter(Boolean)
          .join('; '),
      );
    }
    for (const key of ['detail', 'error', 'message']) {
      const value = record[key];
      if (typeof value === 'string') return quote(value);
      if (typeof value === 'object' && value !== null && typeof (value as { message?: unknown }).message === 'string') {
        return quote((value as { message: string }).message);
      }
    }
  }
  return '';
}

/**
 * Text from the other side made fit for a failure message: data URIs and long base64 runs (echoed image bytes)
 * replaced, whitespace collapsed, cut to `max` characters.
 */
export function quote(text: string, max = QUOTE_MAX_CHARS): string {
  const cleaned = text
    .replace(/data:[^,\s"']*,[A-Za-z0-9+/=_%-]*/gi, 'data:…')
    .replace(/[A-Za-z0-9+/=]{120,}/g, '…')
    .replace(/\s+/g, ' ')
    .trim();
  return cleaned.length > max ? `${cleaned.slice(0, max - 1)}…` : cleaned;
}

export function networkErrorCode(error: unknown): string {
  // Duck-typed: fetch's errors may come from another realm (e.g. under Jest's VM modules), failing `instanceof`.
  const { message, cause } = (error ?? {}) as { message?: unknown; cause?: unknown };
  const { code, message: causeMessage } = (cause ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && code) return code;
  if (typeof causeMessage === 'string' && causeMessage) return quote(causeMessage, 120);
  if (typeof message === 'string' && message) return quote(message, 120);
  return 'unknown error';
}

/** A URL for messages: no query (it may carry a signed token), no credentials. */
export function describeUrl(url: URL): string {
  return `${url.origin}${url.pathname}`;
}

/** An input image as a data URI, the way Cog and Replicate take files inline. */
export function dataUri(name: string, image: Buffer): string {
  return `${dataUriHead(name, image)}${image.toString('base64')}`;
}

/** What comes before an input image's base64 bytes in its data URI: `data:image/png;base64,`. */
export function dataUriHead(name: string, image: Buffer): string {
  const format = imageFormatOf(image);
  if (!format)
    throw new PermanentEngineError('invalid_image', `input image '${quote(name, 60)}' is not a JPEG, PNG or WebP file`);
  return `data:${IMAGE_MIME_TYPES[format]};base64,`;
}

/** The bytes of a base64 data URI, refused past `maxBytes` before they are decoded. */
export function decodeDataUri(uri: string, maxBytes: number, what: string): Buffer {
  const comma = uri.indexOf(',');
  const params = comma < 0 ? [] : uri.slice('data:'.length, comma).split(';');
  if (comma < 0 || params[params.length - 1]?.trim().toLowerCase() !== 'base64') {
    throw engineFailed(`${what} output is a data URI that is not base64-encoded`);
  }
  const payloadChars = uri.length - comma - 1;
  const tooLarge = () => engineFailed(`${what} output is larger than the ${maxBytes} bytes allowed`);
  if (Math.floor((payloadChars * 3) / 4) - 2 > maxBytes) throw tooLarge();
  const data = Buffer.from(uri.slice(comma + 1), 'base64');
  if (data.length > maxBytes) throw tooLarge();
  return data;
}

/**
 * The model's own failure: the job ends `engine_failed`, and the client reads the model's message (trimmed) when
 * `modelMessage` is given.
 */
export function engineFailed(message: string, modelMessage?: string): PermanentEngineError {
  return new PermanentEngineError(
    'engine_failed',
    message,
    modelMessage === undefined ? undefined : quote(modelMessage),
  );
}

/** Waits `ms`, or rejects with the signal's reason once it fires. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', abort);
      resolve();
    }, ms);
    const abort = () => {
      clearTimeout(timer);
      reject(signal!.reason as Error);
    };
    signal?.addEventListener('abort', abort, { once: true });
  });
}
