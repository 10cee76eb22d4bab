import { ArgumentsHost, Catch, ExceptionFilter, HttpException, Logger } from '@nestjs/common';
import type { Response } from 'express';
import { abortFailedResponse } from './logging.js';
import { DomainError, type ProblemCode } from './problem.js';
import { ServiceUnavailableError } from './unavailable.js';

/** Seconds a client should wait before retrying when a backing service is down. */
const UNAVAILABLE_RETRY_AFTER_SECONDS = '5';

/** Turns every error into an RFC 9457 problem; nothing internal (stack, driver message, path) reaches the client. */
@Catch()
export class ProblemFilter implements ExceptionFilter {
  private readonly logger = new Logger('ProblemFilter');

  catch(exception: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const response = http.getResponse<Response>();
    const error = toDomainError(exception);
    // The request id ties the line to the access log line and to what the client was answered.
    const reqId = http.getRequest<{ id?: string }>().id;
    if (error.code === 'internal_error') {
      this.logger.error({ err: exception, reqId }, 'unhandled error');
    } else if (error.code === 'service_unavailable') {
      this.logger.warn({ err: exception, reqId }, 'backing service unavailable');
    }
    if (response.headersSent) {
      abortFailedResponse(response);
      return;
    }
    sendProblem(response, error);
  }
}

/** Answers with the error's problem document and the headers it carries. */
export function sendProblem(response: Response, error: DomainError): void {
  for (const [name, value] of Object.entries(error.options.headers ?? {})) response.setHeader(name, value);
  response.status(error.status).type('application/problem+json').send(JSON.stringify(error.toProblem()));
}

const HTTP_STATUS_CODES: Record<number, ProblemCode> = {
  400: 'bad_request',
  401: 'unauthorized',
  404: 'not_found',
  413: 'payload_too_large',
  429: 'rate_limited',
  503: 'service_unavailable',
};

export function toDomainError(exception: unknown): DomainError {
  if (exception instanceof DomainError) return exception;
  if (exception instanceof ServiceUnavailableError) {
    return new DomainError('service_unavailable', 'A backing service is unavailable; retry shortly.', {
      headers: { 'Retry-After': UNAVAILABLE_RETRY_AFTER_SECONDS },
    });
  }
  // Express's router could not decode the path (not valid percent-encoding; Nest wraps that in a 400): such a
  // path names no resource.
  if (exception instanceof URIError || (exception as { cause?: unknown }).cause instanceof URIError) {
    return new DomainError('not_found', 'No such resource.');
  }
  const status = httpStatusOf(exception);
  if (status === 404) return new DomainError('not_found', 'No such resource.');
  if (status === 405) return new DomainError('not_found', 'No such resource.');
  if (status === 413) return new DomainError('payload_too_large', 'The request body is too large.');
  // body-parser's 415 is about the charset or Content-Encoding of a body; this API's 415 means "not an image".
  if (status === 415) return new DomainError('bad_request', 'Unsupported body charset or encoding.');
  if (status !== undefined && status >= 400 && status < 500) {
    const code = HTTP_STATUS_CODES[status] ?? 'bad_request';
    return new DomainError(code, clientMessage(exception, status));
  }
  return new DomainError('internal_error', 'An unexpected error occurred.');
}

function httpStatusOf(exception: unknown): number | undefined {
  if (exception instanceof HttpException) return exception.getStatus();
  // body-parser and other Express middleware mark client errors with `status`/`statusCode`.
  const candidate = exception as { status?: unknown; statusCode?: unknown } | null;
  const status = candidate?.status ?? candidate?.statusCode;
  return typeof status === 'number' ? status : undefined;
}

function clientMessage(exception: unknown, status: number): string {
  // Nest wraps body-parser's error; its `type` says what was wrong with the body.
  const parserError = (exception as { cause?: unknown }).cause ?? exception;
  const type = (parserError as { type?: unknown } | null)?.type;
  if (type === 'entity.parse.failed') return 'The request body is not valid JSON.';
  if (exception instanceof HttpException && status !== 400) return exception.message;
  return 'The request is malformed.';
}
