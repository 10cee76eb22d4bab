import { createParamDecorator, type ExecutionContext } from '@nestjs/common';
import type { Request } from 'express';

/** Who a request's API key belongs to. */
export interface Principal {
  userId: string;
  /** The key opens the admin pages (the queue board) too. */
  admin: boolean;
}

export type AuthenticatedRequest = Request & {
  principal: Principal;
  /**
   * Whether the key the request was let in with still lets its user in, asked again by answers that outlive the
   * request (an event stream): a revoked key, or a removed user, fails it once AUTH_CACHE_TTL_MS has passed.
   */
  stillAuthorized: () => Promise<boolean>;
};

/** The user the request's API key belongs to. */
export const CurrentUser = createParamDecorator(
  (_data: unknown, context: ExecutionContext): Principal =>
    context.switchToHttp().getRequest<AuthenticatedRequest>().principal,
);

/** The request's `stillAuthorized` check, for an answer that outlives the request. */
export const StillAuthorized = createParamDecorator(
  (_data: unknown, context: ExecutionContext): (() => Promise<boolean>) =>
    context.switchToHttp().getRequest<AuthenticatedRequest>().stillAuthorized,
);
