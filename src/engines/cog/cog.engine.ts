import type { CogRoute } from '../../config/engine-settings.js';
import type { Engine, EngineImage, EngineLimits, EngineRequest } from '../engine.js';
import {
  dataUriHead,
  decodeDataUri,
  engineFailed,
  errorDetail,
  quote,
  sleep,
  type RemoteHttp,
} from '../remote-http.js';
import { describeMissing, type NameSection, namesNotInSchema, settingOf } from '../model-inputs.js';

/** The input names of the model a Cog server serves, from its schema. */
export type CogInputs = ReadonlySet<string>;

/** The model input that carries the job's generation type on the `ENGINE_<TOOL>=cog:<url>` shortcut. */
const GENERATION_TYPE = 'generation_type';
/** Room in a prediction answer for what comes besides the output: echoed input, logs, metrics. */
const RESPONSE_SLACK_BYTES = 4 * 1024 * 1024;
/** Base64 is encoded in slices of this many bytes (a multiple of 3, so slices concatenate without padding). */
const BASE64_SLICE_BYTES = 3 * 64 * 1024;
/**
 * Cog answers a PUT of a prediction it is still running (another run of the same job) with its state and cannot be
 * polled; this run looks again this often.
 */
const RUNNING_RECHECK_MS = 1000;
/**
 * How long a prediction that another run of the job saw end keeps this run from starting the model again: that run
 * stores the result and the job ends (which stops this one). Past it, that run is taken to have died on the way.
 */
const FINISHED_GRACE_MS = 30_000;
/**
 * Kept in the job's run record when a run has the prediction's final answer, with the time. Unlike a Replicate
 * prediction or a ComfyUI prompt, a Cog prediction leaves nothing to read again: Cog keeps a prediction only while it
 * runs, and its output travels in the answer to the PUT alone. So an attempt after one whose result could not be stored
 * (a database or storage blip) runs the model again, after FINISHED_GRACE_MS; the GPU is the operator's own, paid for
 * by the hour rather than by the run.
 */
const FINISHED = 'finished:';
/** The cancel request's own limit: it is sent after the job's signal has fired. */
const CANCEL_TIMEOUT_MS = 5000;

/** Where the image lies once the prediction succeeded. */
type PredictionOutput = { kind: 'bytes'; data: Buffer } | { kind: 'url'; url: string };

/**
 * One route to a Cog model (ENGINES.md, "cog"): a synchronous `PUT /predictions/{job id}` with the tool's inputs
 * under the model's names and the route's params beside them; `POST /predictions/{job id}/cancel` when the job is
 * stopped. A synchronous call says nothing of its progress, so none is reported.
 */
export class CogEngine implements Engine {
  constructor(
    private readonly http: RemoteHttp,
    private readonly route: CogRoute,
    private readonly serverUrl: string,
    private readonly limits: EngineLimits,
    private readonly modelInputs: (signal: AbortSignal | undefined) => Promise<CogInputs>,
  ) {}

  async generate(request: EngineRequest): Promise<Extract<EngineImage, { kind: 'encoded' }>[]> {
    request.signal?.throwIfAborted();
    this.checkInputs(await this.modelInputs(request.signal));
    const images = await this.fetchOutputs(request);
    for (const data of images) await this.http.verifyImage(data);
    request.signal?.throwIfAborted();
    return images.map((data) => ({ kind: 'encoded', data }));
  }

  /** Cog drops input names it does not know without a word, so a mapping mistake would run the model wrongly. */
  private checkInputs(known: CogInputs): void {
    const missing = namesNotInSchema(this.route, known, (section, name) => this.where(section, name));
    if (this.route.passGenerationType && !known.has(GENERATION_TYPE)) {
      missing.push(`"${GENERATION_TYPE}" (${this.shortcut()} sends the generation type)`);
    }
    if (missing.length === 0) return;
    const what = describeMissing(missing, known);
    // The server's address stays in the log.
    throw engineFailed(`The model at ${this.serverUrl} has ${what}`, `The model has ${what}`);
  }

  /** The setting a name comes from, as the operator wrote it. */
  private where(section: NameSection, name: string): string {
    if (this.route.passGenerationType) return `${this.shortcut()}, input ${name}`;
    return settingOf(this.route.key, section, name);
  }

  private shortcut(): string {
    return `ENGINE_${this.route.tool.toUpperCase()}`;
  }

  /** Separate from {@link generate} so that the request body and the raw answer are dropped once decoded. */
  private async fetchOutputs(request: EngineRequest): Promise<Buffer[]> {
    const images: Buffer[] = [];
    for (const output of await this.predict(request)) {
      images.push(output.kind === 'bytes' ? output.data : await this.http.download(output.url, request.signal));
    }
    return images;
  }

  private async predict(request: EngineRequest): Promise<PredictionOutput[]> {
    const body = buildPredictionBody(this.route, request);
    // An answer to a repeated PUT echoes the input; a final one carries the output base64-encoded, plus logs.
    const maxBytes =
      body.length + base64Length(this.limits.maxOutputBytes) * (request.outputs ?? 1) + RESPONSE_SLACK_BYTES;
    const path = `/predictions/${encodeURIComponent(request.jobId)}`;
    const signal = request.signal;
    let canceled: Promise<void> | undefined;
    const cancel = () => {
      canceled = this.cancel(path);
    };
    signal?.addEventListener('abort', cancel, { once: true });
    try {
      signal?.throwIfAborted();
      await this.untilNoOtherRunFinished(request);
      await request.slot?.take();
      for (;;) {
        const answer = await this.http.request({
          method: 'PUT',
          path,
          body,
          contentType: 'application/json',
          maxBytes,
          signal,
          answerStatuses: [422],
        });
        if (answer.status === 422) {
          const detail = errorDetail(answer.body);
          throw engineFailed(`Cog refused the input (HTTP 422)${detail ? `: ${detail}` : ''}`, detail || undefined);
        }
        const prediction = parsePrediction(answer.body);
        if (prediction['status'] === 'starting' || prediction['status'] === 'processing') {
          // Another run of this job (its queue lock lapsed) has the prediction: wait for it rather than run again.
          await sleep(RUNNING_RECHECK_MS, signal);
          await this.untilNoOtherRunFinished(request);
          continue;
        }
        // The model is done with the job: the next job may have the server while this one reads its output.
        await request.slot?.free();
        await request.runs?.remember(`${FINISHED}${Date.now()}`).catch(() => undefined);
        return this.readOutputs(prediction, request.outputs ?? 1, signal);
      }
    } catch (error) {
      // The GPU is freed before the job's stop is reported.
      if (canceled) await canceled;
      throw error;
    } finally {
      signal?.removeEventListener('abort', cancel);
    }
  }

  /**
   * Waits while another run of this job had its prediction end within FINISHED_GRACE_MS: a PUT now would run the model
   * a second time while that run stores the result. The job's end stops this wait (its signal).
   */
  private async untilNoOtherRunFinished(request: EngineRequest): Promise<void> {
    for (;;) {
      const record = await request.runs?.recall().catch(() => undefined);
      const finishedAt = record?.startsWith(FINISHED) ? Number(record.slice(FINISHED.length)) : NaN;
      const left = finishedAt + FINISHED_GRACE_MS - Date.now();
      if (!(left > 0)) return;
      await sleep(Math.min(left, RUNNING_RECHECK_MS), request.signal);
    }
  }

  /** Tells Cog to stop the job's prediction; a prediction already over (404) or a server gone changes nothing. */
  private async cancel(path: string): Promise<void> {
    await this.http
      .request({ method: 'POST', path: `${path}/cancel`, signal: AbortSignal.timeout(CANCEL_TIMEOUT_MS) })
      .catch(() => undefined);
  }

  /**
   * The images a succeeded prediction made, at most `wanted`: its output, or the items of a list (Cog answers a list for
   * a model whose `predict` returns `List[Path]`, or an iterator of them), in order.
   */
  private readOutputs(
    prediction: Record<string, unknown>,
    wanted: number,
    signal: AbortSignal | undefined,
  ): PredictionOutput[] {
    const status = prediction['status'];
    if (status === 'failed') {
      const error = typeof prediction['error'] === 'string' ? prediction['error'] : '';
      throw engineFailed(`Cog prediction failed: ${quote(error) || '(no error message)'}`, error || undefined);
    }
    if (status === 'canceled') {
      signal?.throwIfAborted();
      throw engineFailed('Cog prediction was canceled on the model server', 'The model server canceled the run.');
    }
    if (status !== 'succeeded') {
      const shown = typeof status === 'string' ? `'${quote(status, 40)}'` : 'missing';
      throw engineFailed(`Cog prediction has no usable output: status ${shown}, expected 'succeeded'`);
    }

    const output = prediction['output'];
    const outputs: unknown[] = Array.isArray(output) ? output.slice(0, wanted) : [output];
    if (outputs.length === 0) {
      throw engineFailed('Cog prediction succeeded without an image output (expected a data URI or an http(s) URL)');
    }
    return outputs.map((item) => this.readOutput(item));
  }

  private readOutput(output: unknown): PredictionOutput {
    if (typeof output !== 'string' || output.length === 0) {
      throw engineFailed('Cog prediction succeeded without an image output (expected a data URI or an http(s) URL)');
    }
    if (/^data:/i.test(output)) {
      return { kind: 'bytes', data: decodeDataUri(output, this.limits.maxOutputBytes, 'Cog') };
    }
    if (!/^https?:\/\//i.test(output)) {
      throw engineFailed('Cog prediction output is neither a data URI nor an http(s) URL');
    }
    return { kind: 'url', url: output };
  }
}

/**
 * `{"input": {...}}` with each mapped input under the model's name (images as data URIs, texts as strings), the
 * route's params, and the generation type on the shortcut, written into one buffer: the images' base64 goes straight
 * into it, never into an intermediate string.
 */
function buildPredictionBody(
  route: CogRoute,
  request: Pick<EngineRequest, 'generationType' | 'images' | 'texts' | 'seed' | 'outputs'>,
): Buffer {
  const seen = new Set<string>();
  const claim = (name: string): string => {
    if (seen.has(name)) throw engineFailed(`routes.${route.key}: the model input '${quote(name, 60)}' is given twice`);
    seen.add(name);
    return `${seen.size === 1 ? '' : ','}${JSON.stringify(name)}:`;
  };

  const segments: (string | Buffer)[] = ['{"input":{'];
  for (const [toolName, modelName] of Object.entries(route.inputs)) {
    const image = request.images[toolName];
    const text = request.texts[toolName];
    if (image) segments.push(`${claim(modelName)}"${dataUriHead(toolName, image)}`, image, '"');
    else if (text !== undefined) segments.push(claim(modelName) + JSON.stringify(text));
  }
  for (const [name, value] of Object.entries(route.params)) segments.push(claim(name) + JSON.stringify(value));
  if (route.passGenerationType) segments.push(claim(GENERATION_TYPE) + JSON.stringify(request.generationType));
  if (route.seedInput !== undefined && request.seed !== undefined) {
    segments.push(claim(route.seedInput) + JSON.stringify(request.seed));
  }
  if (typeof route.outputs === 'object')
    segments.push(claim(route.outputs.input) + JSON.stringify(request.outputs ?? 1));
  segments.push('}}');

  let size = 0;
  for (const segment of segments) {
    size += typeof segment === 'string' ? Buffer.byteLength(segment, 'utf8') : base64Length(segment.length);
  }
  const body = Buffer.allocUnsafe(size);
  let offset = 0;
  for (const segment of segments) {
    if (typeof segment === 'string') {
      offset += body.write(segment, offset, 'utf8');
      continue;
    }
    for (let start = 0; start < segment.length; start += BASE64_SLICE_BYTES) {
      const slice = segment.toString('base64', start, Math.min(start + BASE64_SLICE_BYTES, segment.length));
      offset += body.write(slice, offset, 'latin1');
    }
  }
  if (offset !== size) throw new Error(`Cog request body size mismatch: wrote ${offset} of ${size} bytes`);
  return body;
}

function parsePrediction(raw: Buffer): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch {
    throw engineFailed('Cog prediction answer is not JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw engineFailed('Cog prediction answer is not a JSON object');
  }
  return parsed as Record<string, unknown>;
}

function base64Length(bytes: number): number {
  return Math.ceil(bytes / 3) * 4;
}
