import { Global, Module } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import { INPUT_STORE, MEDIA_STORE } from './media.js';
import { MediaController } from './media.controller.js';
import { LocalObjectStore } from './object-store.js';

/** The input and media stores, for the API and the worker alike. */
@Global()
@Module({
  providers: [
    { provide: MEDIA_STORE, inject: [AppConfig], useFactory: (c: AppConfig) => new LocalObjectStore(c.mediaRoot) },
    { provide: INPUT_STORE, inject: [AppConfig], useFactory: (c: AppConfig) => new LocalObjectStore(c.inputRoot) },
  ],
  exports: [MEDIA_STORE, INPUT_STORE],
})
export class MediaModule {}

/** GET /media: served by the API role only. */
@Module({ controllers: [MediaController] })
export class MediaApiModule {}
