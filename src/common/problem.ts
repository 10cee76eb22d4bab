import type { components } from '../generated/openapi.js';

export type Problem = components['schemas']['Problem'];
export type ProblemCode = Problem['code'];
export type FieldError = components['schemas']['ValidationError'];

/** The one place that maps a domain error code to its HTTP status and title. */
const PROBLEM_TYPES: Record<ProblemCode, { status: number; title: string }> = {
  bad_request: { status: 400, title: 'Bad request' },
  validation_failed: { status: 400, title: 'Validation failed' },
  unexpected_field: { status: 400, title: 'Unexpected field' },
  malformed_multipart: { status: 400, title: 'Malformed multipart body' },
  unauthorized: { status: 401, title: 'Unauthorized' },
  media_url_invalid: { status: 403, title: 'Invalid media URL' },
  media_url_expired: { status: 403, title: 'Media URL expired' },
  not_found: { status: 404, title: 'Not found' },
  idempotency_in_progress: { status: 409, title: 'Request with this idempotency key is in progress' },
  not_complete: { status: 409, title: 'History item is not complete' },
  not_pending: { status: 409, title: 'History item is not pending' },
  payload_too_large: { status: 413, title: 'Payload too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported media type' },
  headers_too_large: { status: 431, title: 'Request header fields too large' },
  unknown_tool: { status: 422, title: 'Unknown tool' },
  invalid_generation_type: { status: 422, title: 'Invalid generation type' },
  image_too_small: { status: 422, title: 'Image too small' },
  image_too_large: { status: 422, title: 'Image too large' },
  idempotency_key_reused: { status: 422, title: 'Idempotency key reused with another request' },
  invalid_webhook_url: { status: 422, title: 'Invalid webhook URL' },
  input_fetch_failed: { status: 422, title: 'Input could not be fetched' },
  invalid_webhook_events: { status: 422, title: 'Invalid webhook events' },
  unsupported_option: { status: 422, title: 'Option not supported by the engine' },
  rate_limited: { status: 429, title: 'Too many requests' },
  too_many_pending: { status: 429, title: 'Too many pending jobs' },
  too_many_concurrent_requests: { status: 429, title: 'Too many concurrent requests' },
  service_unavailable: { status: 503, title: 'Service unavailable' },
  internal_error: { status: 500, title: 'Internal error' },
};

function problemStatus(code: ProblemCode): number {
  return PROBLEM_TYPES[code].status;
}

function problemBody(code: ProblemCode, detail: string, errors?: FieldError[]): Problem {
  const { status, title } = PROBLEM_TYPES[code];
  return { type: `urn:igs:problem:${code}`, title, status, detail, code, ...(errors ? { errors } : {}) };
}

/**
 * What services throw: a code the client can branch on and a detail a person can read. Response headers
 * the problem needs (`Retry-After`, `WWW-Authenticate`) travel with it.
 */
export class DomainError extends Error {
  constructor(
    readonly code: ProblemCode,
    readonly detail: string,
    readonly options: { errors?: FieldError[]; headers?: Record<string, string> } = {},
  ) {
    super(detail);
    this.name = 'DomainError';
  }

  get status(): number {
    return problemStatus(this.code);
  }

  toProblem(): Problem {
    return problemBody(this.code, this.detail, this.options.errors);
  }
}
