import { Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { ApiKeyGuard } from './api-key.guard.js';
import { ApiKeyService } from './api-key.service.js';
import { AuthFailureLimit } from './auth-failures.js';
import { DemoKey } from './demo-key.js';

@Module({
  providers: [ApiKeyService, AuthFailureLimit, DemoKey, { provide: APP_GUARD, useClass: ApiKeyGuard }],
  exports: [ApiKeyService],
})
export class AuthModule {}
