/** What the service and a local-engine thread (engine-thread.ts) send each other. */
import type { MessagePort } from 'node:worker_threads';
import type { RenderedOutputs } from '../engine.js';
import { type EngineRequest, PermanentEngineError } from '../engine.js';

/**
 * One job for a thread of the pool. The request's functions and objects with methods stay on the service's side
 * (they cannot be cloned to the thread): the signal and the progress callback become messages on `port`, a channel
 * of the job's own, and the local engine keeps no remote run to record.
 */
export interface ThreadTask {
  request: Omit<EngineRequest, 'signal' | 'onProgress' | 'runs'>;
  port: MessagePort;
}

/** The service's message on a job's port: stop the job at its next checkpoint (its signal fired). */
export interface AbortMessage {
  type: 'abort';
}

/** The thread's message on a job's port: the share of the job done. */
export interface ProgressMessage {
  type: 'progress';
  fraction: number;
}

/**
 * A job's outcome: the thread answers rather than throws, so that an error's code crosses too. A job stopped by its
 * signal fails on the service's side with the signal's own reason.
 */
export type ThreadResult =
  { type: 'done'; outputs: RenderedOutputs } | { type: 'failed'; error: ErrorDescription } | { type: 'stopped' };

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
