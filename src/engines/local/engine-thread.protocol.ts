/** What the service and a local-engine thread (engine-thread.ts) send each other. */
import type { RenderedOutputs } from '../engine.js';
import { type EngineRequest, PermanentEngineError } from '../engine.js';

/**
 * Run one job; the thread answers with progress replies, then one `done` or `failed`. The request's functions and
 * objects with methods stay on the service's side (they cannot be cloned to the thread): the signal is an
 * `abort` message, progress a `progress` reply, and the local engine keeps no remote run to record.
 */
export interface JobMessage {
  type: 'job';
  request: Omit<EngineRequest, 'signal' | 'onProgress' | 'runs'>;
}

/** Stop the running job at its next checkpoint, failing with `reason`. */
export interface AbortMessage {
  type: 'abort';
  reason: ErrorDescription;
}

export type ThreadMessage = JobMessage | AbortMessage;

export type ThreadReply =
  | { type: 'progress'; fraction: number }
  | { type: 'done'; outputs: RenderedOutputs }
  | { type: 'failed'; error: ErrorDescription };

/** The progress of a job whose output files are encoded, reported just before they are handed back. */
export const ENCODED = 0.98;

/** Bytes that crossed threads arrive as plain Uint8Arrays (structured cloning keeps the bytes, not the Buffer class). */
export function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** An error as it crosses threads: its class is lost on the way, its name and a permanent failure's code are kept. */
export interface ErrorDescription {
  name: string;
  message: string;
  permanentCode?: PermanentEngineError['code'];
}

export function describeError(error: unknown): ErrorDescription {
  if (error instanceof PermanentEngineError)
    return { name: error.name, message: error.message, permanentCode: error.code };
  if (error instanceof Error) return { name: error.name, message: error.message };
  return { name: 'Error', message: String(error) };
}

/** The error a description stands for: a PermanentEngineError again, or an Error of the same name. */
export function errorFrom(description: ErrorDescription): Error {
  if (description.permanentCode) return new PermanentEngineError(description.permanentCode, description.message);
  const error = new Error(description.message);
  error.name = description.name;
  return error;
}
