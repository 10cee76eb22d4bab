import { Module } from '@nestjs/common';
import { JobsModule } from '../jobs/jobs.module.js';
import { GenerationController } from './generation.controller.js';
import { GenerationService } from './generation.service.js';
import { IdempotencyKeys } from './idempotency.js';
import { CreationRateLimit } from './limits.js';
import { UploadParser } from './upload.js';

@Module({
  imports: [JobsModule],
  controllers: [GenerationController],
  providers: [GenerationService, UploadParser, IdempotencyKeys, CreationRateLimit],
})
export class GenerationModule {}
