import type { IncomingMessage, ServerResponse } from 'node:http';
import { DomainError } from './problem.js';

/** The longest `Prefer: wait` a request may ask for, in seconds. */
export const MAX_WAIT_SECONDS = 60;

/** Splits at `separator` where it is not inside a quoted string. */
function splitOutsideQuotes(text: string, separator: ',' | ';'): string[] {
  return text.split(new RegExp(`${separator}(?=(?:[^"]*"[^"]*")*[^"]*$)`));
}

/**
 * The `wait` preference of a request's `Prefer` headers (RFC 7240), in seconds; undefined when there is none. Other
 * preferences (a mock's `code=` or `example=`, `respond-async`) are not this service's and are ignored, as are a
 * preference's parameters (`wait=5; x`); its value may be quoted (`wait="5"`).
 */
export function preferredWait(header: string | string[] | undefined): number | undefined {
  const values = Array.isArray(header) ? header : header === undefined ? [] : [header];
  for (const preference of values.flatMap((value) => splitOutsideQuotes(value, ','))) {
    const [nameAndValue] = splitOutsideQuotes(preference, ';');
    const equals = nameAndValue.indexOf('=');
    const name = (equals < 0 ? nameAndValue : nameAndValue.slice(0, equals)).trim();
    if (name.toLowerCase() !== 'wait') continue;
    const value = equals < 0 ? '' : nameAndValue.slice(equals + 1).trim();
    const unquoted = /^"(.*)"$/.exec(value)?.[1] ?? value;
    // delta-seconds: digits only, leading zeros allowed.
    const seconds = /^\d{1,10}$/.test(unquoted) ? Number(unquoted) : NaN;
    if (!(seconds >= 1 && seconds <= MAX_WAIT_SECONDS)) {
      const message = `wait must be a whole number of seconds from 1 to ${MAX_WAIT_SECONDS}`;
      throw new DomainError('validation_failed', `Invalid Prefer: ${message}.`, {
        errors: [{ field: 'Prefer', message }],
      });
    }
    return seconds;
  }
  return undefined;
}

/**
 * Keeps the connection of a request that waits `seconds` (`Prefer: wait`) from being closed as idle meanwhile, and
 * gives it the usual idle timeout back once answered. Answered while the process drains (the wait was cut short), it
 * closes its connection, so that the client's next request goes to another replica.
 */
export function holdOpen(
  request: IncomingMessage,
  response: ServerResponse,
  seconds: number,
  idleTimeoutMs: number,
  draining: AbortSignal,
): void {
  const closeAfter = () => {
    if (!response.headersSent) response.setHeader('Connection', 'close');
  };
  draining.addEventListener('abort', closeAfter, { once: true });
  response.once('close', () => draining.removeEventListener('abort', closeAfter));
  const needed = (seconds + 5) * 1000;
  if (needed <= idleTimeoutMs) return;
  request.socket.setTimeout(needed);
  response.once('finish', () => request.socket.setTimeout(idleTimeoutMs));
}
