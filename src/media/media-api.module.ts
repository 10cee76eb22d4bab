import { Module } from '@nestjs/common';
import { MediaController } from './media.controller.js';

/** GET /media: served by the API role only. */
@Module({ controllers: [MediaController] })
export class MediaApiModule {}
