import { createParamDecorator, type ExecutionContext, SetMetadata } from '@nestjs/common';
import type { Request } from 'express';
import type { Principal } from './api-key.service.js';

export const IS_PUBLIC = 'igs:isPublic';

/** Routes anyone may call: media, health and the contract. */
export const Public = () => SetMetadata(IS_PUBLIC, true);

export type AuthenticatedRequest = Request & { principal: Principal };

/** The user the request's API key belongs to. */
export const CurrentUser = createParamDecorator(
  (_data: unknown, context: ExecutionContext): Principal =>
    context.switchToHttp().getRequest<AuthenticatedRequest>().principal,
);
