import type Replicate from 'replicate';
import { parseProgressFromLogs, type Prediction } from 'replicate';
import { IMAGE_MIME_TYPES, imageFormatOf } from '../../common/image-format.js';
import type { ReplicateRoute } from '../../config/engine-settings.js';
import {
  handsOver,
  PermanentEngineError,
  RunHandedOver,
  TransientEngineError,
  type Engine,
  type EngineImage,
  type EngineLimits,
  type EngineRequest,
  type RunRecord,
} from '../engine.js';
import {
  dataUri,
  decodeDataUri,
  engineFailed,
  errorDetail,
  httpError,
  networkErrorCode,
  quote,
  sleep,
  type RemoteHttp,
} from '../remote-http.js';
import { describeMissing, KeptInputNames, namesNotInSchema, schemaInputNames, settingOf } from '../model-inputs.js';

/** Images up to this size go inline as data URIs; larger ones through the files API. */
const DATA_URI_MAX_BYTES = 1024 * 1024;
/**
 * How long the creation waits for the prediction to end (`Prefer: wait`), so a short run needs no polling. Kept to a
 * second: until the creation answers, the prediction has no id a cancel could name.
 */
const PREFER_WAIT_SECONDS = 1;
const POLL_INTERVAL_MS = 500;
/** A cancel or a file deletion after the job's signal fired gets this long on its own. */
const CLEANUP_TIMEOUT_MS = 5_000;

const FINAL_STATUSES: ReadonlySet<string> = new Set(['succeeded', 'failed', 'canceled', 'aborted']);

/** What a job's run record holds: the prediction, and the files it reads (deleted once it is final). */
interface RunState {
  prediction: string;
  files: string[];
}

/**
 * One route to a model on Replicate (ENGINES.md, "replicate"): the mapped inputs and the route's params, a prediction
 * created with a short `Prefer: wait`, then polled until final with progress from its logs; resumed by a later
 * attempt of the same job, canceled when the job's signal fires, but for the worker's shutdown: then it runs on for
 * the next attempt.
 */
export class ReplicateEngine implements Engine {
  /** The model's input names; undefined when its schema declares none. */
  private readonly inputs = new KeptInputNames((signal) => this.readInputs(this.route.model!, signal));

  constructor(
    private readonly client: Replicate,
    private readonly route: ReplicateRoute,
    private readonly downloads: RemoteHttp,
    private readonly errorBodies: WeakMap<Response, string>,
    private readonly limits: EngineLimits,
  ) {}

  async generate(request: EngineRequest): Promise<Extract<EngineImage, { kind: 'encoded' }>[]> {
    const { signal, runs } = request;
    signal?.throwIfAborted();
    let run = await this.resume(runs, signal);
    let prediction = run?.prediction;
    const files = run?.state.files ?? [];
    // Files stay while a prediction that may still read them runs on after this attempt (a later one deletes them).
    let filesInUse = false;
    try {
      if (!prediction) {
        await this.checkInputs(signal);
        // Large inputs go up to the files API before the job takes its turn on the model.
        const input = await this.input(request, files);
        await request.slot?.take();
        prediction = await this.start(request, input);
        run = { prediction, state: { prediction: prediction.id, files } };
        await runs?.remember(JSON.stringify(run.state));
      }
      filesInUse = true;
      // A prediction an earlier attempt saw end (its result not stored) needs no turn on the model to be read again.
      if (!FINAL_STATUSES.has(prediction.status)) await request.slot?.take();
      prediction = await this.follow(prediction, request);
      filesInUse = false;
      // The model is done with the job: the output's download is the service's work, not the model's.
      await request.slot?.free();
      // The record stays: should storing the result fail, the job's next attempt reads this prediction's output again
      // instead of paying for another. The worker forgets it once the job's outcome is committed.
      const images = await this.outputs(prediction, request.outputs ?? 1, signal);
      return images.map((data) => ({ kind: 'encoded', data }));
    } catch (error) {
      // At the worker's shutdown a started prediction runs on, its files with it, for the next attempt to follow.
      if (handsOver(signal) && run) throw new RunHandedOver(`Replicate prediction ${run.state.prediction}`);
      const mapped = this.mapError(error, 'prediction', signal);
      if (mapped instanceof PermanentEngineError) filesInUse = false;
      // A canceled prediction is of no use to a later attempt. A failed one is kept like a succeeded one: an attempt
      // after a failure to record the job's end finds it failed rather than running the model again.
      if (signal?.aborted) {
        filesInUse = false;
        await runs?.forget();
      }
      throw mapped;
    } finally {
      if (!filesInUse) await deleteFiles(this.client, files);
    }
  }

  /**
   * Replicate drops an input the model does not have without a word, so a mapping mistake would run the model wrongly:
   * a route that names its model has the names it sends checked against the schema of the version it runs. A version
   * alone says no model whose schema could be read.
   */
  private async checkInputs(signal: AbortSignal | undefined): Promise<void> {
    if (!this.route.model) return;
    const known = await this.inputs.get(signal);
    if (!known) return;
    const missing = namesNotInSchema(this.route, known, (section, name) => settingOf(this.route.key, section, name));
    if (missing.length === 0) return;
    const what = describeMissing(missing, known);
    throw engineFailed(`Replicate model ${this.route.model} has ${what}`, `The model has ${what}`);
  }

  /** The input names of the version the route runs: the one it gives, or an official model's latest. */
  private async readInputs(model: string, signal: AbortSignal | undefined): Promise<ReadonlySet<string> | undefined> {
    const [owner, name] = model.split('/');
    try {
      if (this.route.version) {
        return schemaInputNames(
          (await this.client.models.versions.get(owner, name, this.route.version, { signal })).openapi_schema,
        );
      }
      const found = await this.client.models.get(owner, name, { signal });
      if (!found.is_official) throw notOfficial(model);
      return schemaInputNames(found.latest_version?.openapi_schema);
    } catch (error) {
      if (apiResponse(error)?.status !== 404) throw this.mapError(error, `model ${model}`, signal);
      if (!this.route.version) throw notOfficial(model);
      const fix = `Replicate has no version ${this.route.version} of "${model}": the route's model and version must name one model`;
      throw engineFailed(`${fix} (404)`, `${fix}.`);
    }
  }

  /**
   * The prediction an earlier attempt of this job started, to follow instead of running the model again; none when
   * there was none, or it was canceled (by that attempt, on its way out) or is unknown to the API.
   */
  private async resume(
    runs: RunRecord | undefined,
    signal: AbortSignal | undefined,
  ): Promise<{ prediction: Prediction | undefined; state: RunState } | undefined> {
    const recalled = await runs?.recall();
    if (!recalled) return undefined;
    const state = parseRunState(recalled);
    let prediction: Prediction | undefined;
    try {
      prediction = await this.client.predictions.get(state.prediction, { signal });
    } catch (error) {
      if (apiResponse(error)?.status !== 404) throw this.mapError(error, 'prediction', signal);
    }
    if (prediction && prediction.status !== 'canceled' && prediction.status !== 'aborted') {
      return { prediction, state };
    }
    await deleteFiles(this.client, state.files);
    await runs?.forget();
    return undefined;
  }

  /**
   * Creates the prediction. It has no id until the creation answers: an abort meanwhile ends the job at once, and
   * the prediction is canceled as soon as its id is known. The worker's shutdown waits for the answer (at most
   * PREFER_WAIT_SECONDS and a round trip), so that the prediction is recorded and runs on for the next attempt.
   */
  private async start(request: EngineRequest, input: Record<string, unknown>): Promise<Prediction> {
    const target = this.route.version ? { version: this.route.version } : { model: this.route.model! };
    const { signal } = request;
    signal?.throwIfAborted();
    const creating = this.client.predictions.create({ ...target, input, wait: PREFER_WAIT_SECONDS });
    if (!signal) return creating;
    const settled = new AbortController();
    const aborted = new Promise<never>((_, reject) => {
      const abort = () => handsOver(signal) || reject(signal.reason as Error);
      signal.addEventListener('abort', abort, { once: true, signal: settled.signal });
    });
    try {
      return await Promise.race([creating, aborted]);
    } catch (error) {
      if (signal.aborted) {
        creating.then(
          (late) => cancelPrediction(this.client, late.id),
          () => undefined,
        );
      }
      throw error;
    } finally {
      settled.abort();
    }
  }

  /** The model's input: the route's params, then each mapped tool input under the model's name for it. */
  private async input(request: EngineRequest, files: string[]): Promise<Record<string, unknown>> {
    const input: Record<string, unknown> = { ...this.route.params };
    const { seedInput, outputs } = this.route;
    if (seedInput !== undefined && request.seed !== undefined) input[seedInput] = request.seed;
    if (typeof outputs === 'object') input[outputs.input] = request.outputs ?? 1;
    for (const [name, modelName] of Object.entries(this.route.inputs)) {
      const image = request.images[name];
      if (image) input[modelName] = await this.imageInput(name, image, files, request.signal);
      else if (request.texts[name] !== undefined) input[modelName] = request.texts[name];
    }
    return input;
  }

  private async imageInput(name: string, image: Buffer, files: string[], signal?: AbortSignal): Promise<string> {
    if (image.length <= DATA_URI_MAX_BYTES) return dataUri(name, image);
    const format = imageFormatOf(image);
    if (!format) return dataUri(name, image); // refuses it, naming the input
    const file = new File([new Uint8Array(image)], `${name}.${format}`, { type: IMAGE_MIME_TYPES[format] });
    const uploaded = await this.client.files.create(file, {}, { signal });
    files.push(uploaded.id);
    return uploaded.urls.get;
  }

  /**
   * Polls until the prediction is final, reporting the progress its logs show. When the signal fires, the
   * prediction is canceled before the signal's reason is thrown (but for the worker's shutdown).
   */
  private async follow(prediction: Prediction, request: EngineRequest): Promise<Prediction> {
    const { signal, onProgress } = request;
    let current = prediction;
    let reported: number | undefined;
    try {
      for (;;) {
        const fraction = parseProgressFromLogs(current)?.percentage;
        if (fraction !== undefined && fraction !== reported) {
          reported = fraction;
          onProgress?.(fraction);
        }
        if (FINAL_STATUSES.has(current.status)) return current;
        await sleep(POLL_INTERVAL_MS, signal);
        current = await this.client.predictions.get(current.id, { signal });
      }
    } catch (error) {
      if (signal?.aborted && !handsOver(signal)) await cancelPrediction(this.client, current.id);
      throw error;
    }
  }

  /**
   * The images a succeeded prediction made, at most `wanted`: its output, or the items of a list (a model with a
   * `num_outputs` input answers one), each a URL or a data URI.
   */
  private async outputs(prediction: Prediction, wanted: number, signal: AbortSignal | undefined): Promise<Buffer[]> {
    const what = `Replicate prediction ${prediction.id}`;
    if (prediction.status === 'failed') {
      const message = typeof prediction.error === 'string' ? prediction.error : '';
      throw engineFailed(`${what} failed: ${quote(message) || '(no error message)'}`, message || undefined);
    }
    if (prediction.status !== 'succeeded') throw engineFailed(`${what} ended ${prediction.status}`);
    const outputs: unknown[] = Array.isArray(prediction.output)
      ? prediction.output.slice(0, wanted)
      : [prediction.output];
    const images: Buffer[] = [];
    for (const output of outputs) {
      if (typeof output !== 'string' || output.length === 0) {
        throw engineFailed(`${what} succeeded without an image output (expected a URL or a data URI)`);
      }
      const data = /^data:/i.test(output)
        ? decodeDataUri(output, this.limits.maxOutputBytes, 'Replicate')
        : await this.downloads.download(output, signal);
      await this.downloads.verifyImage(data);
      images.push(data);
    }
    if (images.length === 0) throw engineFailed(`${what} succeeded without an image output (an empty list)`);
    return images;
  }

  /**
   * The engine's error for a failure of the client: the signal's reason after an abort; Replicate refusing the request
   * (4xx) fails the job with Replicate's `detail`; 429 and 5xx, already repeated by the client, fail the attempt.
   */
  private mapError(error: unknown, what: string, signal: AbortSignal | undefined): unknown {
    if (signal?.aborted) return signal.reason;
    if (error instanceof PermanentEngineError || error instanceof TransientEngineError) return error;
    const response = apiResponse(error);
    if (response) {
      const detail = errorDetail(Buffer.from(this.errorBodies.get(response) ?? ''));
      const mapped = httpError(response.status, `Replicate ${what}`, detail);
      return mapped instanceof PermanentEngineError ? engineFailed(mapped.message, detail || undefined) : mapped;
    }
    if (error instanceof SyntaxError) return engineFailed(`Replicate ${what} answer is not JSON`);
    return new TransientEngineError(`Replicate ${what} failed: ${networkErrorCode(error)}`, { cause: error });
  }
}

/**
 * A model by name that Replicate does not run so: only its official models run by name. Most models, Real-ESRGAN among
 * them, run by version; the operator has to route them so.
 */
function notOfficial(model: string): PermanentEngineError {
  const fix = `Replicate runs "${model}" only by its version, if at all: give the route \`version:\` (the model's API page shows it), not \`model:\``;
  return engineFailed(`Replicate has no official model ${model}. ${fix}`, `${fix}.`);
}

/** The response of the client's `ApiError` (a status other than 2xx), told by its shape: the class is not exported. */
function apiResponse(error: unknown): Response | undefined {
  const response = (error as { response?: { status?: unknown } } | null)?.response;
  return typeof response?.status === 'number' ? (response as Response) : undefined;
}

/**
 * A prediction a job's attempt left running (its run record) is canceled, and the files it read are deleted, at once:
 * the job has ended, or runs elsewhere now, and whoever stops it waits for this, at most CLEANUP_TIMEOUT_MS when
 * Replicate does not answer.
 */
export async function abandonPrediction(client: Replicate, recorded: string): Promise<void> {
  const state = parseRunState(recorded);
  await Promise.all([cancelPrediction(client, state.prediction), deleteFiles(client, state.files)]);
}

/** Tells Replicate to stop the prediction; a failure here cannot change the job's end, so it is not raised. */
async function cancelPrediction(client: Replicate, id: string): Promise<void> {
  await client.predictions.cancel(id, { signal: AbortSignal.timeout(CLEANUP_TIMEOUT_MS) }).catch(() => undefined);
}

/** Deletes uploaded inputs; one left behind expires on Replicate's side, so a failure is not the job's. */
async function deleteFiles(client: Replicate, files: readonly string[]): Promise<void> {
  await Promise.all(
    files.map((id) =>
      client.files.delete(id, { signal: AbortSignal.timeout(CLEANUP_TIMEOUT_MS) }).catch(() => undefined),
    ),
  );
}

/** A run record as `generate` writes it; an unreadable one names a prediction without files. */
function parseRunState(recalled: string): RunState {
  try {
    const parsed = JSON.parse(recalled) as Partial<RunState>;
    if (typeof parsed.prediction === 'string') {
      const files = Array.isArray(parsed.files) ? parsed.files.filter((id) => typeof id === 'string') : [];
      return { prediction: parsed.prediction, files };
    }
  } catch {
    // Not JSON: the bare prediction id.
  }
  return { prediction: recalled, files: [] };
}
