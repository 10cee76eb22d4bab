import { pipeline } from 'node:stream/promises';
import { Controller, Get, Inject, Param, ParseUUIDPipe, Res } from '@nestjs/common';
import type { Response } from 'express';
import { Public } from '../common/public.js';
import { DomainError } from '../common/problem.js';
import { MEDIA_CACHE_CONTROL, MEDIA_STORE, outputContentType } from './media.js';
import type { ObjectStore } from './object-store.js';

/**
 * Results are public but unguessable (the job's UUID is in the path) and never change once written, so
 * they are cached for a year. Uploaded inputs live in another store and have no route at all.
 */
@Public()
@Controller('media')
export class MediaController {
  constructor(@Inject(MEDIA_STORE) private readonly media: ObjectStore) {}

  @Get(':id/:file')
  async get(
    @Param('id', new ParseUUIDPipe({ exceptionFactory: noSuchMediaFile })) id: string,
    @Param('file') file: string,
    @Res() response: Response,
  ): Promise<void> {
    const contentType = outputContentType(file);
    const object = contentType ? await this.media.open(`${id}/${file}`) : undefined;
    if (!object) throw noSuchMediaFile();
    response.set({
      'Content-Type': contentType,
      'Content-Length': String(object.size),
      'Cache-Control': MEDIA_CACHE_CONTROL,
      'X-Content-Type-Options': 'nosniff',
    });
    // A client that leaves mid-download is no error; pipeline then destroys the source, which frees its file
    // handle or its S3 connection instead of leaving it paused forever.
    await pipeline(object.stream, response).catch(() => response.destroy());
  }
}

/** Not cached: the file may be written later under this name. */
function noSuchMediaFile(): DomainError {
  return new DomainError('not_found', 'No such media file.', { headers: { 'Cache-Control': 'no-store' } });
}
