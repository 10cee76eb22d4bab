import { Module } from '@nestjs/common';
import { GenerationController } from './generation.controller.js';
import { GenerationProducer } from './generation.producer.js';
import { GenerationService } from './generation.service.js';
import { IdempotencyKeys } from './idempotency.js';
import { CreationRateLimit } from './limits.js';
import { QueueModule } from './queue.module.js';
import { UploadParser } from './upload.js';

@Module({
  imports: [QueueModule],
  controllers: [GenerationController],
  providers: [GenerationService, GenerationProducer, UploadParser, IdempotencyKeys, CreationRateLimit],
  exports: [GenerationProducer],
})
export class GenerationModule {}
