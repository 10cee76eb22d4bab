import { type MiddlewareConsumer, Module, type NestModule, RequestMethod } from '@nestjs/common';
import { json } from 'express';
import { FilesModule } from '../files/files.module.js';
import { FilesSweep } from '../files/files-sweep.js';
import { JobsModule } from '../jobs/jobs.module.js';
import { FilesController } from './files.controller.js';
import { GenerationController } from './generation.controller.js';
import { GenerationService } from './generation.service.js';
import { IdempotencyKeys } from './idempotency.js';
import { JsonJobs } from './json-jobs.js';
import { LimitsModule } from '../users/limits.module.js';
import { CreationRateLimit } from './limits.js';
import { UploadParser } from './upload.js';
import { UploadLeftovers } from './upload-leftovers.js';
import { UrlInputs } from './url-inputs.js';
import { UsageController } from './usage.controller.js';
import { UsageService } from './usage.service.js';

@Module({
  imports: [JobsModule, LimitsModule, FilesModule],
  controllers: [GenerationController, FilesController, UsageController],
  providers: [
    GenerationService,
    UploadParser,
    UploadLeftovers,
    IdempotencyKeys,
    CreationRateLimit,
    JsonJobs,
    UrlInputs,
    FilesSweep,
    UsageService,
  ],
})
export class GenerationModule implements NestModule {
  /**
   * A job may come as JSON: the parser reads only a body declared `application/json` (100 KB at most) and leaves a
   * multipart one untouched for the upload's own reader.
   */
  configure(consumer: MiddlewareConsumer): void {
    consumer
      .apply(json())
      .forRoutes(
        { path: 'generation/generate_image_v2', method: RequestMethod.POST },
        { path: 'generation/generate_image_v2/', method: RequestMethod.POST },
      );
  }
}
