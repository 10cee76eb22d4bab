import { Global, Module } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import { INPUT_STORE, MEDIA_STORE } from './media.js';
import { MediaStorage } from './media-storage.js';

/** The input and media stores, for the API and the worker alike. */
@Global()
@Module({
  providers: [
    { provide: MediaStorage, inject: [AppConfig], useFactory: (config: AppConfig) => MediaStorage.from(config) },
    { provide: MEDIA_STORE, inject: [MediaStorage], useFactory: (storage: MediaStorage) => storage.media },
    { provide: INPUT_STORE, inject: [MediaStorage], useFactory: (storage: MediaStorage) => storage.inputs },
  ],
  exports: [MEDIA_STORE, INPUT_STORE],
})
export class MediaModule {}
