import { Module } from '@nestjs/common';
import { FairShare } from './fair-share.js';
import { UserLimits } from './user-limits.js';
import { UsersModule } from './users.module.js';

/** Each user's limits in effect, and their share at once of what holds requests open (API processes only). */
@Module({ imports: [UsersModule], providers: [UserLimits, FairShare], exports: [UserLimits, FairShare] })
export class LimitsModule {}
