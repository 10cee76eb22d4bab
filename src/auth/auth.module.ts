import { Module } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { ApiKey } from './api-key.entity.js';
import { ApiKeyGuard } from './api-key.guard.js';
import { ApiKeyRepository } from './api-key.repository.js';
import { ApiKeyService } from './api-key.service.js';
import { AuthFailureLimit } from './auth-failures.js';
import { DemoKey } from './demo-key.js';
import { User } from './user.entity.js';

export const AUTH_ENTITIES = [User, ApiKey];

/** Users and their API keys: the guard on every route, and the key tool (src/cli.ts). */
@Module({
  imports: [TypeOrmModule.forFeature(AUTH_ENTITIES)],
  providers: [ApiKeyRepository, ApiKeyService],
  exports: [ApiKeyService],
})
export class ApiKeysModule {}

@Module({
  imports: [ApiKeysModule],
  providers: [AuthFailureLimit, DemoKey, { provide: APP_GUARD, useClass: ApiKeyGuard }],
})
export class AuthModule {}
