import { createBullBoard } from '@bull-board/api';
import { BullAdapter } from '@bull-board/api/bullAdapter';
import { ExpressAdapter } from '@bull-board/express';
import { getQueueToken } from '@nestjs/bull';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { Queue } from 'bull';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ApiKeyService } from '../auth/api-key.service.js';
import { AuthFailureLimit } from '../auth/auth-failures.js';
import { sendProblem, toDomainError } from '../common/problem.filter.js';
import { DomainError } from '../common/problem.js';
import { QUEUE_BOARD_ROUTE } from '../common/security.js';
import { GENERATION_QUEUE, WEBHOOK_QUEUE } from '../queue/queues.js';

/** The browser's login prompt names this realm; the 401 asks for HTTP Basic, whose password is the admin key. */
const REALM = 'igs-admin';

/**
 * Bull Board at /admin/queues over the generation and webhook queues, for admin keys only (an API process's page for
 * operators, outside the public contract). Read-only: a job's state belongs to its history item and the lifecycle
 * (cancel and delete through the API, `igs users delete`), which a job retried or removed by hand would bypass.
 */
export function mountQueueBoard(app: NestExpressApplication): void {
  const board = new ExpressAdapter().setBasePath(`/${QUEUE_BOARD_ROUTE}`);
  createBullBoard({
    queues: [GENERATION_QUEUE, WEBHOOK_QUEUE].map(
      (name) => new BullAdapter(app.get<Queue>(getQueueToken(name)), { readOnlyMode: true }),
    ),
    serverAdapter: board,
    options: { uiConfig: { boardTitle: 'igs queues', hideDocsLink: true } },
  });
  app.use(`/${QUEUE_BOARD_ROUTE}`, adminOnly(app.get(ApiKeyService), app.get(AuthFailureLimit)), board.getRouter());
}

/**
 * Lets a request through with an admin key, sent as `Authorization: Bearer <key>` or as the password of HTTP Basic
 * (any user name), so that a browser can open the page. No key or an unknown one: 401 asking for Basic; a key that is
 * not an admin's: 403. Wrong keys count toward the address's AUTH_FAILURES_PER_MINUTE as the API's do.
 */
function adminOnly(keys: ApiKeyService, failures: AuthFailureLimit): RequestHandler {
  const check = async (request: Request, response: Response): Promise<boolean> => {
    failures.assertAllowed(request.ip);
    const key = keyOf(request.headers.authorization);
    const principal = key === undefined ? undefined : await keys.authenticate(key);
    if (!principal) {
      // A browser asks without credentials first, for the page and each of its files, until the 401 has it prompt:
      // that is the handshake of HTTP Basic, not a guess, and only a wrong key counts.
      if (key !== undefined) await failures.recordFailure(request.ip);
      throw new DomainError(
        'unauthorized',
        key === undefined
          ? 'Send an admin key as the password of HTTP Basic, or as "Authorization: Bearer <api_key>".'
          : 'The API key is unknown or revoked.',
        { headers: { 'WWW-Authenticate': `Basic realm="${REALM}", charset="UTF-8"` } },
      );
    }
    if (principal.admin) return true;
    response
      .status(403)
      .type('application/problem+json')
      .send(
        JSON.stringify({
          type: 'urn:igs:problem:forbidden',
          title: 'Forbidden',
          status: 403,
          detail: 'This page needs an admin key (igs keys create --user <name> --admin).',
          code: 'forbidden',
        }),
      );
    return false;
  };
  return (request: Request, response: Response, next: NextFunction) => {
    check(request, response).then(
      (allowed) => (allowed ? next() : undefined),
      (error: unknown) => sendProblem(response, toDomainError(error)),
    );
  };
}

/** The key in a Bearer or Basic `Authorization` header (Basic: the password, after the first colon). */
function keyOf(authorization: string | undefined): string | undefined {
  const bearer = /^Bearer +(\S+) *$/i.exec(authorization ?? '');
  if (bearer) return bearer[1];
  const basic = /^Basic +([A-Za-z0-9+/]+=*) *$/i.exec(authorization ?? '');
  if (!basic) return undefined;
  const credentials = Buffer.from(basic[1], 'base64').toString('utf8');
  const colon = credentials.indexOf(':');
  return colon >= 0 && colon < credentials.length - 1 ? credentials.slice(colon + 1) : undefined;
}
