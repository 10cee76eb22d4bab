import { Module } from '@nestjs/common';
import { JobsModule } from '../jobs/jobs.module.js';
import { GenerationController } from './generation.controller.js';
import { GenerationService } from './generation.service.js';
import { IdempotencyKeys } from './idempotency.js';
import { LimitsModule } from '../users/limits.module.js';
import { CreationRateLimit } from './limits.js';
import { UploadParser } from './upload.js';
import { UploadLeftovers } from './upload-leftovers.js';

@Module({
  imports: [JobsModule, LimitsModule],
  controllers: [GenerationController],
  providers: [GenerationService, UploadParser, UploadLeftovers, IdempotencyKeys, CreationRateLimit],
})
export class GenerationModule {}
