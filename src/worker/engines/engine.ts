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
  tool: string;
  generationType: string;
  images: EngineImages;
  /** Text inputs of the tool, e.g. `prompt` for the default tool. */
  texts: Readonly<Record<string, string>>;
  signal?: AbortSignal;
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

export interface Engine {
  generate(request: EngineRequest): Promise<EngineImage>;
}

/**
 * A failure that will fail again on retry: an input that does not decode, a rejected request, or an input the engine
 * cannot make a right result from (`unsupported_input`, `no_person_found`), whose message then tells the client, in
 * plain words, what input would work.
 */
export class PermanentEngineError extends Error {
  constructor(
    readonly code: 'invalid_image' | 'engine_failed' | 'unsupported_input' | 'no_person_found',
    message: string,
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
