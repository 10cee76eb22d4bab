/** The backing services whose outages the client is told to wait out. */
export type BackingService = 'database' | 'queue' | 'redis';

/**
 * A backing service did not answer. Each adapter (the database, the queue, Redis) turns its driver's
 * connection failures into this error where it first catches them, so nothing else reads driver errors;
 * the problem filter answers it 503 with Retry-After, since the same request may succeed shortly.
 */
export class ServiceUnavailableError extends Error {
  constructor(
    readonly service: BackingService,
    options?: { cause?: unknown },
  ) {
    super(`The ${service} is unavailable`, options);
    this.name = 'ServiceUnavailableError';
  }
}
