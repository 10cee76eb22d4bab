import { Global, Module } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import { MediaUrls } from './media-urls.js';

/** Signed media URLs, for the processes that show items (API, webhook deliveries) and serve them; not for `igs`. */
@Global()
@Module({
  providers: [{ provide: MediaUrls, inject: [AppConfig], useFactory: (config: AppConfig) => MediaUrls.from(config) }],
  exports: [MediaUrls],
})
export class MediaUrlsModule {}
