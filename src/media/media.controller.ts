import { Controller, Get, Inject, Param, Res } from '@nestjs/common';
import type { Response } from 'express';
import { Public } from '../auth/auth.decorators.js';
import { DomainError } from '../common/problem.js';
import { MEDIA_STORE, OUTPUT_FILES } from './media.js';
import type { ObjectStore } from './object-store.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const CONTENT_TYPES = new Map<string, string>(
  Object.values(OUTPUT_FILES).map((file) => [file.name, file.contentType]),
);

/**
 * Results are public but unguessable (the job's UUID is in the path) and never change once written, so
 * they are cached for a year. Uploaded inputs live in another store and have no route at all.
 */
@Public()
@Controller('media')
export class MediaController {
  constructor(@Inject(MEDIA_STORE) private readonly media: ObjectStore) {}

  @Get(':id/:file')
  async get(@Param('id') id: string, @Param('file') file: string, @Res() response: Response): Promise<void> {
    const contentType = CONTENT_TYPES.get(file);
    const object = contentType && UUID.test(id) ? await this.media.open(`${id}/${file}`) : undefined;
    if (!object) {
      response.setHeader('Cache-Control', 'no-store');
      throw new DomainError('not_found', 'No such media file.');
    }
    response.set({
      'Content-Type': contentType,
      'Content-Length': String(object.size),
      'Cache-Control': 'public, max-age=31536000, immutable',
      'X-Content-Type-Options': 'nosniff',
    });
    object.stream.on('error', () => response.destroy());
    object.stream.pipe(response);
  }
}
