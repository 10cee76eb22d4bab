import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import type { Request } from 'express';

/** Who a request's API key belongs to. */
export interface Principal {
  userId: string;
  /** The key opens the admin pages (the queue board) too. */
  admin: boolean;
}

export type AuthenticatedRequest = Request & { principal: Principal };

/** The user the request's API key belongs to. */
export const CurrentUser = createParamDecorator(
  (_data: unknown, context: ExecutionContext): Principal =>
    context.switchToHttp().getRequest<AuthenticatedRequest>().principal,
);
