import { createHash, randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Injectable } from '@nestjs/common';
import { publicOnlyLookup, RefusedAddress, webhookUrlProblem } from '../common/network-policy.js';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { PRIVATE_FILE_MODE } from '../media/object-store.js';
import { Probe, UploadStorageError } from './upload-storage.js';

/** A fetched body in a temporary file, seen by a probe on its way there, as an upload's file part is. */
export interface FetchedFile {
  path: string;
  size: number;
  probe: Probe;
}

const MAX_REDIRECTS = 3;
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

/** Why the input's URL gave no body: a 422 naming the input. */
function fetchFailed(field: string, why: string): DomainError {
  return new DomainError('input_fetch_failed', `The input "${field}" could not be fetched: ${why}.`, {
    errors: [{ field, message: why }],
  });
}

/**
 * Fetches the image URLs of JSON job creations under the webhooks' rules (src/common/network-policy.ts): https only
 * (http with WEBHOOK_ALLOW_HTTP), public addresses only (unless WEBHOOK_ALLOW_PRIVATE_NETWORKS), checked on the address
 * connected to; at most three redirects, each target judged again; URL_FETCH_TIMEOUT for the whole of it; the body
 * cut off past UPLOAD_MAX_FILE_BYTES. Node's client, not fetch: fetch cannot be told which addresses it may reach.
 */
@Injectable()
export class UrlInputs {
  constructor(private readonly config: AppConfig) {}

  /**
   * The body of `url` in a temporary file; every failure is the input's 4xx problem, and leaves no file. `abandon`
   * stops the fetch early (another input of the job failed: this one is no longer needed).
   */
  async fetch(field: string, url: string, options: { hash: boolean; abandon?: AbortSignal }): Promise<FetchedFile> {
    const timeout = AbortSignal.timeout(this.config.urlFetchTimeoutMs);
    const signal = options.abandon ? AbortSignal.any([timeout, options.abandon]) : timeout;
    let target = url;
    for (let redirects = 0; ; redirects++) {
      const problem = webhookUrlProblem(target, {
        allowHttp: this.config.webhookAllowHttp,
        allowPrivateNetworks: this.config.webhookAllowPrivateNetworks,
      });
      if (problem) throw fetchFailed(field, redirects === 0 ? `its URL ${problem}` : `a redirect's target ${problem}`);
      const response = await this.get(field, new URL(target), signal, timeout);
      const status = response.statusCode ?? 0;
      const location = response.headers.location;
      if (REDIRECT_STATUSES.has(status) && location) {
        response.resume();
        if (redirects === MAX_REDIRECTS) throw fetchFailed(field, `more than ${MAX_REDIRECTS} redirects`);
        target = new URL(location, target).href;
        continue;
      }
      if (status < 200 || status > 299) {
        response.resume();
        throw fetchFailed(field, `answered HTTP ${status}`);
      }
      return this.receive(field, response, { signal, timeout }, options.hash);
    }
  }

  private get(field: string, url: URL, signal: AbortSignal, timeout: AbortSignal): Promise<IncomingMessage> {
    const client = url.protocol === 'https:' ? https : http;
    return new Promise((resolve, reject) => {
      const request = client.request(url, {
        method: 'GET',
        headers: { Accept: 'image/jpeg, image/png, image/webp', 'User-Agent': 'igs-input-fetch' },
        lookup: this.config.webhookAllowPrivateNetworks ? undefined : publicOnlyLookup,
        signal,
      });
      request.once('response', resolve);
      request.once('error', (error) => reject(this.failure(field, error, timeout)));
      request.end();
    });
  }

  private async receive(
    field: string,
    response: IncomingMessage,
    { signal, timeout }: { signal: AbortSignal; timeout: AbortSignal },
    hash: boolean,
  ): Promise<FetchedFile> {
    const limit = this.config.uploadMaxFileBytes;
    const tooLarge = new DomainError('payload_too_large', `The input "${field}" is larger than ${limit} bytes.`, {
      errors: [{ field, message: `at most ${limit} bytes` }],
    });
    if (Number(response.headers['content-length'] ?? 0) > limit) {
      response.destroy();
      throw tooLarge;
    }
    const probe = new Probe(hash ? createHash('sha256') : undefined);
    const path = join(this.config.uploadTmpDir, randomUUID());
    let size = 0;
    const see = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        size += chunk.length;
        if (size > limit) return done(tooLarge);
        probe.see(chunk);
        done(null, chunk);
      },
    });
    try {
      await pipeline(response, see, createWriteStream(path, { flags: 'wx', mode: PRIVATE_FILE_MODE }), { signal });
    } catch (error) {
      probe.release();
      await rm(path, { force: true });
      if (error === tooLarge) throw tooLarge;
      // A file this machine cannot write (its error names the path) is the service's failure, not the URL's.
      if ((error as NodeJS.ErrnoException).path !== undefined) throw new UploadStorageError(error);
      throw this.failure(field, error, timeout);
    }
    return { path, size, probe };
  }

  /** A failed exchange as the input's problem: the reason in words a client can act on, never a stack. */
  private failure(field: string, error: unknown, timeout: AbortSignal): DomainError {
    if (error instanceof DomainError) return error;
    if (timeout.aborted) return fetchFailed(field, `no answer within ${this.config.urlFetchTimeoutMs / 1000} s`);
    if (error instanceof RefusedAddress) return fetchFailed(field, `refused: ${error.message}, not a public address`);
    const code = (error as NodeJS.ErrnoException).code;
    return fetchFailed(field, code ? `network error ${code}` : 'the connection failed');
  }
}
