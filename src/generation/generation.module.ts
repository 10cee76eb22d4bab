import { Module } from '@nestjs/common';
import { JobsModule } from '../jobs/jobs.module.js';
import { GenerationController } from './generation.controller.js';
import { GenerationService } from './generation.service.js';
import { IdempotencyKeys } from './idempotency.js';
import { UsersModule } from '../users/users.module.js';
import { CreationRateLimit, UserLimits } from './limits.js';
import { UploadParser } from './upload.js';
import { UploadLeftovers } from './upload-leftovers.js';
import { UsageController } from './usage.controller.js';
import { UsageService } from './usage.service.js';

@Module({
  imports: [JobsModule, UsersModule],
  controllers: [GenerationController, UsageController],
  providers: [
    GenerationService,
    UploadParser,
    UploadLeftovers,
    IdempotencyKeys,
    CreationRateLimit,
    UserLimits,
    UsageService,
  ],
})
export class GenerationModule {}
