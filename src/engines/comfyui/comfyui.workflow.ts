import { createHash } from 'node:crypto';
import type { ComfyRoute, ComfyWorkflow } from '../../config/engine-settings.js';
import type { EngineRequest } from '../engine.js';
import { quote } from '../remote-http.js';

/**
 * What the comfyui kind computes without talking to the server: the prompt a job sends (the route's workflow with
 * the job's values in the mapped node inputs), the ids and seed derived from the job id, the seeds a node input
 * takes, the run record's text, the messages made from ComfyUI's validation errors, and the job's progress from the
 * websocket's messages.
 */

/**
 * The seeds a route draws from: `count` integers from `first` up. At most 2^48 of them, so that each is a safe integer
 * (KSampler's `seed` takes 0 to 2^64 - 1, which JSON numbers in JavaScript do not hold exactly).
 */
export interface SeedRange {
  first: number;
  count: number;
}

const MOST_SEEDS = 2 ** 48;

/** The seeds of an input that declares no range. */
export const ANY_SEED: SeedRange = { first: 0, count: MOST_SEEDS };

/** A node class as `GET /object_info` describes it (`server.py`'s `node_info`). */
export interface NodeClassInfo {
  output_node?: unknown;
  /** `INPUT_TYPES()`: each input's spec, `[type, options]`, the type a name or a list of choices. */
  input?: { required?: Record<string, unknown>; optional?: Record<string, unknown> };
}

/**
 * The seeds ComfyUI's validation lets into the class's input (`validate_inputs` refuses an INT below its `min` or
 * above its `max`), from 0 up where the range allows (some nodes take -1 for "pick one at random"); or, when the input
 * takes no seed, the reason, for the operator.
 */
export function seedRangeOf(info: NodeClassInfo | undefined, input: string): SeedRange | { problem: string } {
  const spec = info?.input?.required?.[input] ?? info?.input?.optional?.[input];
  if (!Array.isArray(spec)) return { problem: `which has no input "${input}"` };
  const [type, options] = spec as [unknown, { min?: unknown; max?: unknown } | undefined];
  if (type !== 'INT') {
    const takes = typeof type === 'string' ? `a ${type}` : 'one of a list of choices';
    return { problem: `whose input "${input}" takes ${takes}, not an INT` };
  }
  const min = typeof options?.min === 'number' ? Math.ceil(options.min) : -Infinity;
  const max = typeof options?.max === 'number' ? Math.floor(options.max) : Infinity;
  const first = max >= 0 ? Math.max(min, 0) : Math.max(min, max - MOST_SEEDS + 1);
  const count = Math.min(max - first + 1, MOST_SEEDS);
  if (count < 1 || !Number.isSafeInteger(first) || !Number.isSafeInteger(first + count - 1)) {
    return {
      problem: `whose input "${input}" takes no seed this service can draw (min ${String(options?.min)}, max ${String(options?.max)})`,
    };
  }
  return { first, count };
}

/** A file the server holds in its input folder, as `POST /upload/image` answered. */
export interface UploadedImage {
  name: string;
  subfolder: string;
}

/**
 * The route's workflow with the job's values: each image input's uploaded file in its loader's input (as
 * `subfolder/name`, how LoadImage names a file below the input folder), each text in its node input, the seed (the job's, else drawn from its id) and the batch size.
 * The route's workflow itself is left as it is.
 */
export function buildPrompt(
  route: Pick<ComfyRoute, 'workflow' | 'inputs' | 'seed' | 'outputs'>,
  request: Pick<EngineRequest, 'jobId' | 'texts' | 'seed' | 'outputs'>,
  uploads: Readonly<Record<string, UploadedImage>>,
  seeds: SeedRange,
): ComfyWorkflow {
  const { jobId, texts } = request;
  const prompt = structuredClone(route.workflow) as Record<
    string,
    { class_type: string; inputs: Record<string, unknown> }
  >;
  for (const [name, target] of Object.entries(route.inputs)) {
    const upload = uploads[name];
    const text = texts[name];
    if (upload)
      prompt[target.node].inputs[target.input] = upload.subfolder ? `${upload.subfolder}/${upload.name}` : upload.name;
    else if (text !== undefined) prompt[target.node].inputs[target.input] = text;
  }
  if (route.seed) {
    // The job's seed as it is where the input takes it (0 to 2^32 - 1 fits every usual seed input), else within range.
    prompt[route.seed.node].inputs[route.seed.input] =
      request.seed === undefined ? seedFor(jobId, seeds) : seeds.first + (request.seed % seeds.count);
  }
  if (typeof route.outputs === 'object') {
    prompt[route.outputs.batch.node].inputs[route.outputs.batch.input] = request.outputs ?? 1;
  }
  return prompt;
}

/**
 * The same number for every attempt of one job, so a retry draws the same image. Over {@link ANY_SEED} it is the
 * number drawn before ranges were read, so a job retried across that upgrade keeps its seed.
 */
export function seedFor(jobId: string, seeds: SeedRange): number {
  return seeds.first + (createHash('sha256').update(`seed:${jobId}`).digest().readUIntBE(0, 6) % seeds.count);
}

/**
 * The prompt id the job's `run`-th prompt is queued under: a UUID (what ComfyUI accepts as a client's `prompt_id`)
 * derived from the job id, so an attempt that starts after its predecessor died between queueing and recording finds
 * the prompt by the id it would have used.
 */
export function promptIdFor(jobId: string, run: number): string {
  const hex = createHash('sha256').update(`prompt:${jobId}:${run}`).digest('hex');
  // Version 8 (custom) and the RFC 4122 variant, in ComfyUI's canonical lowercase hyphenated form.
  const variant = ((parseInt(hex[16], 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-8${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/**
 * The job's prompt as the run record keeps it. `run` numbers the job's prompts, and with the job id makes each one's
 * id. `sending`: the id was recorded before `POST /prompt` answered, so a prompt missing from the server may simply
 * never have arrived. `queued`: the server took it. `stopped`: the job's worker stopped it (a timeout, a shutdown),
 * so another attempt queues the next run: the server keeps the stopped one's history under its id.
 */
export interface RecordedRun {
  promptId: string;
  run: number;
  state: 'sending' | 'queued' | 'stopped';
}

export function encodeRun({ promptId, run, state }: RecordedRun): string {
  return `${state}:${run}:${promptId}`;
}

/** Undefined for anything this kind did not write (the record is then ignored and the job starts afresh). */
export function decodeRun(text: string | undefined): RecordedRun | undefined {
  const match = /^(queued|sending|stopped):(\d+):([0-9a-zA-Z-]{1,100})$/.exec(text ?? '');
  if (!match) return undefined;
  return { state: match[1] as RecordedRun['state'], run: Number(match[2]), promptId: match[3] };
}

/** One entry of `node_errors` in ComfyUI's 400 answer to `POST /prompt`. */
interface NodeError {
  class_type?: unknown;
  errors?: { message?: unknown; details?: unknown }[];
}

/**
 * ComfyUI's refusal of a prompt (`{error, node_errors}`) in words: each failing node's class, id and messages, or the
 * prompt-wide error (a missing node type, no outputs) when no node is named.
 */
export function describeRefusal(body: unknown): string {
  const { error, node_errors: nodeErrors } = (body ?? {}) as { error?: unknown; node_errors?: unknown };
  const nodes: string[] = [];
  if (typeof nodeErrors === 'object' && nodeErrors !== null) {
    for (const [id, entry] of Object.entries(nodeErrors as Record<string, NodeError>)) {
      const messages = (Array.isArray(entry.errors) ? entry.errors : [])
        .map(({ message, details }) => [message, details].filter((part) => typeof part === 'string' && part).join(': '))
        .filter(Boolean);
      const kind = typeof entry.class_type === 'string' ? entry.class_type : 'node';
      nodes.push(`${kind} ${id}: ${messages.join('; ') || 'invalid'}`);
    }
  }
  if (nodes.length > 0) return quote(nodes.join('; '));
  if (typeof error === 'string') return quote(error);
  if (typeof error === 'object' && error !== null) {
    const { message, details } = error as { message?: unknown; details?: unknown };
    return quote([message, details].filter((part) => typeof part === 'string' && part).join(' '));
  }
  return 'the prompt was refused';
}

/**
 * How far one prompt is, from the websocket's messages: nodes done (cached, or run and left for the next) plus the
 * running node's sampler steps (`value/max`), over the workflow's nodes. Only ever rises.
 */
export class PromptProgress {
  private readonly done = new Set<string>();
  private current: string | undefined;
  private step = 0;
  private highest = 0;

  constructor(private readonly nodeCount: number) {}

  cached(nodes: readonly string[]): number {
    for (const node of nodes) this.done.add(node);
    return this.fraction();
  }

  executing(node: string | null): number {
    if (this.current !== undefined) this.done.add(this.current);
    this.current = node ?? undefined;
    this.step = 0;
    return this.fraction();
  }

  sampled(value: number, max: number): number {
    if (max > 0 && Number.isFinite(value)) this.step = Math.min(Math.max(value / max, 0), 1);
    return this.fraction();
  }

  private fraction(): number {
    const running = this.current !== undefined && !this.done.has(this.current) ? this.step : 0;
    const now = Math.min((this.done.size + running) / Math.max(this.nodeCount, 1), 1);
    this.highest = Math.max(this.highest, now);
    return this.highest;
  }
}
