/**
 * The engine port: what the worker asks of an engine, whatever runs the model (sharp on this machine, a Cog
 * container, Replicate's API, a ComfyUI server), and the errors an engine ends a job with.
 */

/** The two files clients download, as `renderOutputs` encodes them. */
export interface RenderedOutputs {
  /** Full-resolution result as JPEG. */
  stock: Buffer;
  /** At most PREVIEW_MAX_SIDE px on the long side, as WebP. */
  preview: Buffer;
}

/** One decoded image handed to an engine: the private input file's bytes, already validated at upload. */
export type EngineImages = Readonly<Record<string, Buffer>>;

export interface EngineRequest {
  /**
   * The history item's id. A remote engine names its run on the model server with it (or records the server's name
   * for it), so that another attempt of the same job finds that run instead of starting the model a second time.
   */
  jobId: string;
  tool: string;
  generationType: string;
  /** Image inputs of the tool, as uploaded; for a model server's engine, upright and without metadata (plainImage). */
  images: EngineImages;
  /** Text inputs of the tool, e.g. `prompt` for the default tool. */
  texts: Readonly<Record<string, string>>;
  /** The seed this run takes, for a route whose model takes one (the job's, or one drawn for it). */
  seed?: number;
  /**
   * How many results are wanted of this run; unset, one. A route whose model makes several at once (Cog's or
   * Replicate's `num_outputs` input, a ComfyUI batch) asks it for that many; a list output gives at most that many.
   */
  outputs?: number;
  /**
   * Fires when the job is canceled, deleted, past its engine's timeout, or the worker shuts down (its reason then a
   * WorkerShutdown).
   */
  signal?: AbortSignal;
  /**
   * How far the job is, from 0 to 1, whenever the engine learns it. Calls may be frequent and need not rise: the
   * caller keeps the highest value and passes it on at its own pace.
   */
  onProgress?: (fraction: number) => void;
  /** Where a remote engine keeps the id of the run it started on the model server for this job. */
  runs?: RunRecord;
  /** The job's turn on its model server, for a route whose server has a `concurrency`. */
  slot?: EngineSlot;
}

/**
 * The job's turn on its model server: one of the `concurrency` jobs the server takes at once, counted across all
 * workers. A remote engine takes it just before it hands the job to the model and frees it as soon as the model is done
 * with it, so that its uploads, downloads and checks overlap other jobs' turns and the server never waits on the
 * service. The engine's `timeout` does not run while the job waits for its turn. Both are safe to call more than once;
 * a take after a free waits for a turn again (a run the server lost after it said it was done, queued again).
 */
export interface EngineSlot {
  /** Resolves with the server the slot is on: the engine's name, or one address of its pool. */
  take(): Promise<string | undefined>;
  free(): Promise<void>;
}

/**
 * The model server's id of the run an engine started for one job, kept outside the worker process: a second attempt
 * of the job (its worker died, or its queue lock lapsed while the model kept going) resumes that run.
 */
export interface RunRecord {
  recall(): Promise<string | undefined>;
  remember(runId: string): Promise<void>;
  forget(): Promise<void>;
}

/**
 * The engine's single result image. Local engines hand back raw pixels so the renderer encodes once, or, on
 * their own threads, the two files the renderer made there; remote engines hand back the encoded file they
 * received.
 */
export type EngineImage =
  | { kind: 'raw'; data: Buffer; width: number; height: number; channels: 3 | 4 }
  | { kind: 'encoded'; data: Buffer }
  | { kind: 'rendered'; outputs: RenderedOutputs };

/** One run's results: one image, or those of a model that made several (a list output, a batch), in order. */
export type EngineResult = EngineImage | readonly EngineImage[];

export interface Engine {
  generate(request: EngineRequest): Promise<EngineResult>;
}

/**
 * One model server named in the routing file, as its kind's code serves it: an engine for each route to it (a
 * route says which model, and how the tool's inputs map onto the model's), whether the server answers, and what
 * it holds open (connections, sockets) to close on shutdown.
 */
export interface EngineServer<Route> {
  engineFor(route: Route): Engine;
  /**
   * Stops a run an engine of this server recorded in a job's `runs` (the text it remembered) when no attempt will
   * follow it: the job ended between attempts, or a rollout routed it to another server. Any route's run, whatever
   * the routes are now. Servers whose runs end with their attempt have none. A failure is not raised.
   */
  abandon?(recorded: string): Promise<void>;
  /** Resolves true when the server answers its health or status request within the signal's time. */
  probe(signal: AbortSignal): Promise<boolean>;
  close(): Promise<void>;
}

/** What every engine is held to, from the service's own settings. */
export interface EngineLimits {
  /** Largest output image accepted, in bytes as downloaded. */
  maxOutputBytes: number;
  /** Largest output image accepted, in pixels (OUTPUT_MAX_PIXELS): read from its header, before it is ever decoded. */
  maxOutputPixels: number;
  /** Shortest side of a model's output: an uploaded image's least. */
  minOutputSide: number;
}

/**
 * A failure that will fail again on retry: an input that does not decode, a rejected request, a model's own failure,
 * or an input the engine cannot make a right result from (`unsupported_input`, `no_person_found`), whose message then
 * tells the client, in plain words, what input would work.
 */
export class PermanentEngineError extends Error {
  constructor(
    readonly code: 'invalid_image' | 'engine_failed' | 'unsupported_input' | 'no_person_found',
    message: string,
    /**
     * Shown to the client as `error.message` for `engine_failed`: the model's own message (trimmed), or what the
     * operator must fix (a mapped input the model does not have). Unset, the client reads a generic sentence and the
     * full message stays in the log.
     */
    readonly clientMessage?: string,
  ) {
    super(message);
    this.name = 'PermanentEngineError';
  }
}

/**
 * A failure that may succeed on retry: timeout, server unreachable or reset, HTTP 5xx, 409 (a model server busy with
 * another prediction), 408, 429. The worker retries it until the job's attempts run out.
 */
export class TransientEngineError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TransientEngineError';
  }
}

/** The engine did not answer in time; if the job's last attempt ends so, the job's error is `timeout`. */
export class EngineTimeoutError extends TransientEngineError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'EngineTimeoutError';
  }
}

/**
 * The reason a job's signal fires when its worker shuts down (a rollout). A remote engine whose run goes on without
 * the worker (a ComfyUI prompt, a Replicate prediction) leaves it running, recorded in the job's run record for the
 * next attempt to follow, and throws RunHandedOver; the others stop their run as for any other end.
 */
export class WorkerShutdown extends Error {
  constructor() {
    super('the worker is shutting down');
    this.name = 'WorkerShutdown';
  }
}

/**
 * The job's run left going on its model server at its worker's shutdown, for the job's next attempt: the job keeps
 * its slot until that attempt takes it over (or its lease lapses), as the server is still busy with it.
 */
export class RunHandedOver extends Error {
  constructor(run: string) {
    super(`the worker shut down; ${run} goes on for the job's next attempt`);
    this.name = 'RunHandedOver';
  }
}

/** Whether the job's signal fired for its worker's shutdown: a run that goes on without the worker is left to run. */
export function handsOver(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true && signal.reason instanceof WorkerShutdown;
}
