import sharp from 'sharp';
import { IMAGE_MIME_TYPES, imageFormatOf } from '../../common/image-format.js';

import {
  EngineTimeoutError,
  PermanentEngineError,
  TransientEngineError,
  type Engine,
  type EngineImage,
  type EngineRequest,
} from '../engine.js';

export interface CogEngineOptions {
  /** Limit for the prediction request (sending, running, answering) and, separately, for an output download. */
  timeoutMs: number;
  /** Largest output image accepted, in decoded bytes. */
  maxOutputBytes: number;
}

/** Cut for model error text and error bodies quoted in failure messages. */
const QUOTE_MAX_CHARS = 300;
/** Error bodies are read only this far (they are quoted, truncated, in the message). */
const ERROR_BODY_MAX_BYTES = 64 * 1024;
/** Room in the prediction response for what comes besides the output: echoed input, logs, metrics. */
const RESPONSE_SLACK_BYTES = 4 * 1024 * 1024;
/** Base64 is encoded in slices of this many bytes (a multiple of 3, so slices concatenate without padding). */
const BASE64_SLICE_BYTES = 3 * 64 * 1024;

/** Where the image lies once the prediction succeeded. */
type PredictionOutput = { kind: 'bytes'; data: Buffer } | { kind: 'url'; url: URL };

/**
 * Runs a generation on a model served with Cog's HTTP prediction API (`POST /predictions`, synchronous mode).
 * Image inputs go as data URIs, texts as strings, plus `generation_type`; the output (a data URI or an http(s) URL,
 * or an array whose first item is one) comes back as the encoded image it is.
 */
export class CogEngine implements Engine {
  private readonly predictionsUrl: URL;

  constructor(
    baseUrl: string,
    private readonly options: CogEngineOptions,
  ) {
    let base: URL;
    try {
      base = new URL(baseUrl);
    } catch {
      throw new Error(`Cog engine base URL '${baseUrl}' is not a valid URL`);
    }
    if (base.protocol !== 'http:' && base.protocol !== 'https:') {
      throw new Error(`Cog engine base URL must be http(s), got '${base.protocol}'`);
    }
    if (base.username || base.password) {
      throw new Error('Cog engine base URL must not contain credentials');
    }
    if (!Number.isFinite(options.timeoutMs) || options.timeoutMs <= 0) {
      throw new Error(`Cog engine timeoutMs must be a positive number, got ${options.timeoutMs}`);
    }
    if (!Number.isSafeInteger(options.maxOutputBytes) || options.maxOutputBytes <= 0) {
      throw new Error(`Cog engine maxOutputBytes must be a positive integer, got ${options.maxOutputBytes}`);
    }
    this.predictionsUrl = new URL(`${base.pathname.replace(/\/+$/, '')}/predictions`, base);
    this.predictionsUrl.search = '';
    this.predictionsUrl.hash = '';
  }

  async generate(request: EngineRequest): Promise<Extract<EngineImage, { kind: 'encoded' }>> {
    request.signal?.throwIfAborted();
    const data = await this.fetchOutput(request);
    await verifyImage(data);
    request.signal?.throwIfAborted();
    return { kind: 'encoded', data };
  }

  /** Separate from {@link generate} so that the request body and the raw response are dropped once decoded. */
  private async fetchOutput(request: EngineRequest): Promise<Buffer> {
    const output = await this.predict(request);
    if (output.kind === 'bytes') return output.data;
    return this.download(output.url, request.signal);
  }

  private async predict(request: EngineRequest): Promise<PredictionOutput> {
    const body = buildPredictionBody(request);
    // The answer may echo the input and carries the output base64-encoded, plus logs.
    const maxResponseBytes = body.length + base64Length(this.options.maxOutputBytes) + RESPONSE_SLACK_BYTES;
    const raw = await this.fetchCapped(
      this.predictionsUrl,
      {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json', Prefer: 'wait' },
        body,
      },
      { what: 'Cog prediction', maxBytes: maxResponseBytes, callerSignal: request.signal },
    );
    const prediction = parsePrediction(raw);
    return this.readOutput(prediction);
  }

  private readOutput(prediction: Record<string, unknown>): PredictionOutput {
    const status = prediction['status'];
    if (status === 'failed') {
      const error = typeof prediction['error'] === 'string' ? quote(prediction['error']) : '';
      throw engineFailed(`Cog prediction failed: ${error || '(no error message)'}`);
    }
    if (status === 'canceled') throw engineFailed('Cog prediction was canceled');
    if (status !== 'succeeded') {
      const shown = typeof status === 'string' ? `'${quote(status, 40)}'` : 'missing';
      throw engineFailed(`Cog prediction has no usable output: status ${shown}, expected 'succeeded'`);
    }

    let output = prediction['output'];
    if (Array.isArray(output)) output = output[0];
    if (typeof output !== 'string' || output.length === 0) {
      throw engineFailed('Cog prediction succeeded without an image output (expected a data URI or an http(s) URL)');
    }
    if (/^data:/i.test(output)) return { kind: 'bytes', data: this.decodeDataUri(output) };

    let url: URL | undefined;
    try {
      url = new URL(output);
    } catch {
      url = undefined;
    }
    if (url?.protocol !== 'http:' && url?.protocol !== 'https:') {
      throw engineFailed('Cog prediction output is neither a data URI nor an http(s) URL');
    }
    return { kind: 'url', url };
  }

  private decodeDataUri(uri: string): Buffer {
    const comma = uri.indexOf(',');
    const params = comma < 0 ? [] : uri.slice('data:'.length, comma).split(';');
    if (comma < 0 || params[params.length - 1]?.trim().toLowerCase() !== 'base64') {
      throw engineFailed('Cog prediction output is a data URI that is not base64-encoded');
    }
    const payloadChars = uri.length - comma - 1;
    if (Math.floor((payloadChars * 3) / 4) - 2 > this.options.maxOutputBytes) {
      throw this.tooLarge();
    }
    const data = Buffer.from(uri.slice(comma + 1), 'base64');
    if (data.length > this.options.maxOutputBytes) throw this.tooLarge();
    return data;
  }

  private download(url: URL, callerSignal: AbortSignal | undefined): Promise<Buffer> {
    return this.fetchCapped(
      url,
      { method: 'GET', headers: { Accept: 'image/jpeg, image/png, image/webp, image/*;q=0.8' }, redirect: 'follow' },
      {
        what: 'Cog output download',
        maxBytes: this.options.maxOutputBytes,
        callerSignal,
        tooLarge: () => this.tooLarge(),
      },
    );
  }

  /**
   * One HTTP exchange with its own timeout, combined with the caller's signal: the status is mapped to an error,
   * then the body is read up to `maxBytes`. Failures come out mapped (transient or permanent) except a caller abort,
   * which comes out as the caller's `signal.reason`.
   */
  private async fetchCapped(
    url: URL,
    init: RequestInit,
    context: { what: string; maxBytes: number; callerSignal: AbortSignal | undefined; tooLarge?: () => Error },
  ): Promise<Buffer> {
    const { what, maxBytes, callerSignal } = context;
    const timeout = AbortSignal.timeout(this.options.timeoutMs);
    const signal = callerSignal ? AbortSignal.any([timeout, callerSignal]) : timeout;
    const target = describeUrl(url);
    try {
      const response = await fetch(url, { ...init, signal });
      if (!response.ok) {
        const detail = errorDetail(await readBody(response, ERROR_BODY_MAX_BYTES, () => undefined));
        throw httpError(response.status, `${what} (${init.method} ${target})`, detail);
      }
      const tooLarge = context.tooLarge ?? (() => engineFailed(`${what} answer is larger than ${maxBytes} bytes`));
      return await readBody(response, maxBytes, tooLarge);
    } catch (error) {
      if (callerSignal?.aborted) throw callerSignal.reason;
      if (error instanceof PermanentEngineError || error instanceof TransientEngineError) throw error;
      if (timeout.aborted) {
        throw new EngineTimeoutError(`${what} timed out after ${this.options.timeoutMs} ms (${target})`, {
          cause: error,
        });
      }
      throw new TransientEngineError(`${what} failed to reach ${target}: ${networkErrorCode(error)}`, {
        cause: error,
      });
    }
  }

  private tooLarge(): PermanentEngineError {
    return engineFailed(`Cog output image is larger than the ${this.options.maxOutputBytes} bytes allowed`);
  }
}

/**
 * `{"input": {"generation_type": ..., <text>: ..., <image>: "data:image/...;base64,..."}}` written straight into one
 * buffer of the exact size: the only copy of the images the request needs (no base64 string, no JSON string).
 */
export function buildPredictionBody(request: Pick<EngineRequest, 'generationType' | 'images' | 'texts'>): Buffer {
  const seen = new Set<string>();
  const claim = (name: string): string => {
    if (seen.has(name)) throw engineFailed(`Cog input '${quote(name, 60)}' is given twice`);
    seen.add(name);
    return `${seen.size === 1 ? '' : ','}${JSON.stringify(name)}:`;
  };

  const segments: (string | Buffer)[] = ['{"input":{'];
  segments.push(claim('generation_type') + JSON.stringify(request.generationType));
  for (const [name, text] of Object.entries(request.texts)) {
    segments.push(claim(name) + JSON.stringify(text));
  }
  for (const [name, image] of Object.entries(request.images)) {
    const format = imageFormatOf(image);
    if (!format) {
      const message = `input image '${quote(name, 60)}' is not a JPEG, PNG or WebP file`;
      throw new PermanentEngineError('invalid_image', message);
    }
    segments.push(`${claim(name)}"data:${IMAGE_MIME_TYPES[format]};base64,`, image, '"');
  }
  segments.push('}}');

  let size = 0;
  for (const segment of segments) {
    size += typeof segment === 'string' ? Buffer.byteLength(segment, 'utf8') : base64Length(segment.length);
  }
  const body = Buffer.allocUnsafe(size);
  let offset = 0;
  for (const segment of segments) {
    if (typeof segment === 'string') {
      offset += body.write(segment, offset, 'utf8');
      continue;
    }
    for (let start = 0; start < segment.length; start += BASE64_SLICE_BYTES) {
      const slice = segment.toString('base64', start, Math.min(start + BASE64_SLICE_BYTES, segment.length));
      offset += body.write(slice, offset, 'latin1');
    }
  }
  if (offset !== size) throw new Error(`Cog request body size mismatch: wrote ${offset} of ${size} bytes`);
  return body;
}

function parsePrediction(raw: Buffer): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    throw engineFailed('Cog prediction answer is not JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw engineFailed('Cog prediction answer is not a JSON object');
  }
  return parsed as Record<string, unknown>;
}

/** Verify the output is a JPEG, PNG or WebP image sharp can read. */
async function verifyImage(data: Buffer): Promise<void> {
  let format: string | undefined;
  try {
    ({ format } = await sharp(data).metadata());
  } catch {
    throw engineFailed(`Cog output is not an image (${data.length} bytes sharp cannot read)`);
  }
  if (format !== 'jpeg' && format !== 'png' && format !== 'webp') {
    throw engineFailed(`Cog output is a ${format ?? 'unknown'} image, expected JPEG, PNG or WebP`);
  }
}

/** Read a body up to `maxBytes`; past that, cancel it and throw `tooLarge()` (or return the bytes read so far). */
async function readBody(response: Response, maxBytes: number, tooLarge: () => Error | undefined): Promise<Buffer> {
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

function httpError(status: number, what: string, detail: string): Error {
  const message = `${what} answered HTTP ${status}${detail ? `: ${detail}` : ''}`;
  if (status === 408 || status === 409 || status === 429 || status >= 500) return new TransientEngineError(message);
  return engineFailed(message);
}

/** A short, safe summary of an error body: FastAPI/pydantic `detail` entries without their echoed input values. */
function errorDetail(raw: Buffer): string {
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
    }
  }
  return '';
}

/**
 * Text from the other side made fit for a failure message: data URIs and long base64 runs (echoed image bytes)
 * replaced, whitespace collapsed, cut to `max` characters.
 */
function quote(text: string, max = QUOTE_MAX_CHARS): string {
  const cleaned = text
    .replace(/data:[^,\s"']*,[A-Za-z0-9+/=_%-]*/gi, 'data:…')
    .replace(/[A-Za-z0-9+/=]{120,}/g, '…')
    .replace(/\s+/g, ' ')
    .trim();
  return cleaned.length > max ? `${cleaned.slice(0, max - 1)}…` : cleaned;
}

function networkErrorCode(error: unknown): string {
  // Duck-typed: fetch's errors may come from another realm (e.g. under Jest's VM modules), failing `instanceof`.
  const { message, cause } = (error ?? {}) as { message?: unknown; cause?: unknown };
  const { code, message: causeMessage } = (cause ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string' && code) return code;
  if (typeof causeMessage === 'string' && causeMessage) return quote(causeMessage, 120);
  if (typeof message === 'string' && message) return quote(message, 120);
  return 'unknown error';
}

/** A URL for messages: no query (it may carry a signed token), no credentials. */
function describeUrl(url: URL): string {
  return `${url.origin}${url.pathname}`;
}

function base64Length(bytes: number): number {
  return Math.ceil(bytes / 3) * 4;
}

function engineFailed(message: string): PermanentEngineError {
  return new PermanentEngineError('engine_failed', message);
}
