import { pipeline } from 'node:stream/promises';
import { Controller, Get, Inject, Param, ParseUUIDPipe, Req, Res } from '@nestjs/common';
import type { Request, Response } from 'express';
import type { AuthenticatedRequest } from '../auth/auth.decorators.js';
import { abortFailedResponse } from '../common/logging.js';
import { DomainError } from '../common/problem.js';
import { KeyOptional } from '../common/public.js';
import { AppConfig } from '../config/config.js';
import { HistoryRepository } from '../jobs/history.repository.js';
import { MEDIA_PREFIX, MEDIA_STORE, MEDIA_URL_MAX_AGE_SECONDS, outputContentType } from './media.js';
import { MediaUrls } from './media-urls.js';
import type { ObjectStore } from './object-store.js';

/** Errors of a response whose client went away mid-answer: no failure of the service. */
const CLIENT_GONE = new Set(['ERR_STREAM_PREMATURE_CLOSE', 'ECONNRESET', 'EPIPE', 'ERR_STREAM_DESTROYED']);

/**
 * Results, to whoever holds a signed URL of theirs until it expires, or to their owner's key (API.md "Media"); only
 * while their item exists and is complete, whatever files remain. Cached privately and never past the URL's expiry,
 * so no shared cache serves a result after its delete. Uploaded inputs live in another store and have no route at all.
 */
@KeyOptional()
@Controller('media')
export class MediaController {
  constructor(
    @Inject(MEDIA_STORE) private readonly media: ObjectStore,
    private readonly items: HistoryRepository,
    private readonly urls: MediaUrls,
    private readonly config: AppConfig,
  ) {}

  @Get(':id/:file')
  async get(
    @Param('id', new ParseUUIDPipe({ exceptionFactory: noSuchMediaFile })) id: string,
    @Param('file') file: string,
    @Req() request: Request & Partial<Pick<AuthenticatedRequest, 'principal'>>,
    @Res() response: Response,
  ): Promise<void> {
    const contentType = outputContentType(file);
    if (!contentType) throw noSuchMediaFile();
    const now = Date.now();
    const principal = request.principal;
    // A key decides when one is sent: its owner gets the file, anyone else a 404 as for another user's item.
    const expiresAt = principal ? undefined : this.signedUntil(`${MEDIA_PREFIX}${id}/${file}`, request, now);
    const item = await this.items.mediaOwner(id);
    if (item?.status !== 'complete' || (principal && item.userId !== principal.userId)) throw noSuchMediaFile();

    const secondsLeft = expiresAt === undefined ? 0 : Math.ceil((expiresAt - now) / 1000);
    const cacheControl = `private, max-age=${Math.min(secondsLeft, MEDIA_URL_MAX_AGE_SECONDS)}`;
    const key = `${id}/${file}`;
    if (this.config.mediaDelivery === 'presigned') {
      // Expiring no later than the URL it answers; a key's request gets what a URL signed now would.
      const seconds = expiresAt === undefined ? this.urls.expiresFrom(now) - Math.floor(now / 1000) : secondsLeft;
      const location = await this.media.presignedGet(key, seconds, cacheControl);
      if (location) {
        response.set({ 'Cache-Control': cacheControl, Location: location }).status(302).end();
        return;
      }
    }
    // Opened before anything is answered: a result removed before this is a 404, one removed after is sent whole.
    const object = await this.media.open(key);
    if (!object) throw noSuchMediaFile();
    response.set({
      'Content-Type': contentType,
      'Content-Length': String(object.size),
      'Cache-Control': cacheControl,
      'X-Content-Type-Options': 'nosniff',
    });
    // Either way pipeline destroys the source, which frees its file handle or its S3 connection.
    await pipeline(object.stream, response).catch((error: NodeJS.ErrnoException) => {
      if (!CLIENT_GONE.has(error.code ?? '')) abortFailedResponse(response);
    });
  }

  /** When the request's signed URL expires (ms), or the 403 that its missing, altered or expired signature earns. */
  private signedUntil(path: string, request: Request, now: number): number {
    const { expires, signature } = request.query;
    const check = this.urls.check(path, expires, signature, now);
    if (check === 'invalid') {
      throw new DomainError(
        'media_url_invalid',
        "This media URL is not signed by the service; use the URL the API returned, or send the owner's key.",
        { headers: { 'Cache-Control': 'no-store' } },
      );
    }
    const expiresAt = Number(expires) * 1000;
    if (check === 'expired') {
      throw new DomainError(
        'media_url_expired',
        `This media URL expired at ${new Date(expiresAt).toISOString()}; read the item again for a fresh one.`,
        { headers: { 'Cache-Control': 'no-store' } },
      );
    }
    return expiresAt;
  }
}

/** Not cached: the file may be written later under this name. */
function noSuchMediaFile(): DomainError {
  return new DomainError('not_found', 'No such media file.', { headers: { 'Cache-Control': 'no-store' } });
}
