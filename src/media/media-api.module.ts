import { Module } from '@nestjs/common';
import { JobsModule } from '../jobs/jobs.module.js';
import { MediaController } from './media.controller.js';

/** GET /media: served by the API role only; results are served only while their item exists. */
@Module({ imports: [JobsModule], controllers: [MediaController] })
export class MediaApiModule {}
