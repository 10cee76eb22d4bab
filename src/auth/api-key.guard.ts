import { type CanActivate, type ExecutionContext, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { DomainError } from '../common/problem.js';
import { ApiKeyService, bearerKey } from './api-key.service.js';
import { AuthFailureLimit } from './auth-failures.js';
import { IS_PUBLIC, KEY_OPTIONAL } from '../common/public.js';
import { type AuthenticatedRequest } from './auth.decorators.js';

/**
 * Every route needs `Authorization: Bearer <api_key>` unless marked @Public(), or @KeyOptional() and sent none. An
 * address that collected too many 401s is refused before its key is looked at (AuthFailureLimit).
 */
@Injectable()
export class ApiKeyGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly apiKeys: ApiKeyService,
    private readonly failures: AuthFailureLimit,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const targets = [context.getHandler(), context.getClass()];
    if (this.reflector.getAllAndOverride<boolean>(IS_PUBLIC, targets)) return true;

    const request = context.switchToHttp().getRequest<AuthenticatedRequest>();
    if (
      request.headers.authorization === undefined &&
      this.reflector.getAllAndOverride<boolean>(KEY_OPTIONAL, targets)
    ) {
      return true;
    }
    this.failures.assertAllowed(request.ip);
    const key = bearerKey(request.headers.authorization);
    if (key === undefined) {
      await this.failures.recordFailure(request.ip);
      throw new DomainError('unauthorized', 'Send an API key as "Authorization: Bearer <api_key>".', {
        headers: { 'WWW-Authenticate': 'Bearer' },
      });
    }
    const principal = await this.apiKeys.authenticate(key);
    if (!principal) {
      await this.failures.recordFailure(request.ip);
      throw new DomainError('unauthorized', 'The API key is unknown or revoked.', {
        headers: { 'WWW-Authenticate': 'Bearer error="invalid_token"' },
      });
    }
    request.principal = principal;
    request.stillAuthorized = async () => (await this.apiKeys.authenticate(key))?.userId === principal.userId;
    return true;
  }
}
