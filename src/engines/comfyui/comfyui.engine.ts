import { IMAGE_MIME_TYPES, imageFormatOf } from '../../common/image-format.js';
import type { ComfyRoute } from '../../config/engine-settings.js';
import {
  handsOver,
  PermanentEngineError,
  RunHandedOver,
  TransientEngineError,
  type Engine,
  type EngineImage,
  type EngineRequest,
} from '../engine.js';
import { engineFailed, quote, type RemoteHttp } from '../remote-http.js';
import type { ComfyMessage, ComfySocket, PromptWatch } from './comfyui.socket.js';
import {
  ANY_SEED,
  buildPrompt,
  decodeRun,
  describeRefusal,
  encodeRun,
  PromptProgress,
  promptIdFor,
  seedRangeOf,
  type NodeClassInfo,
  type RecordedRun,
  type SeedRange,
  type UploadedImage,
} from './comfyui.workflow.js';

/** How long a prompt waits for the shared socket to open before it is queued anyway (and followed by polling). */
const SOCKET_WAIT_MS = 2_000;
/** Between lookups of a prompt over HTTP while the socket is open: a safety net for a lost message. */
const POLL_OPEN_MS = 5_000;
/**
 * Between lookups while the socket is closed, or while following a prompt an earlier attempt queued (its messages go
 * to that attempt's process).
 */
const POLL_BLIND_MS = 500;
/** Between lookups once the prompt said it ended and its history is awaited. */
const POLL_ENDING_MS = 100;
/** Lookups that fail in a row (each already tried 3 times) before the attempt gives up and is retried. */
const LOOKUP_FAILURES_ALLOWED = 5;
/** The cancel's requests together: a canceled job frees the GPU within a second. */
const CANCEL_TIMEOUT_MS = 900;
/** Prompts a server restart may lose in one attempt of a job, each queued again from scratch. */
const LOSSES_ALLOWED = 1;
/** `GET /object_info` describes every node class the server has; with many custom nodes it is large. */
const OBJECT_INFO_MAX_BYTES = 64 * 1024 * 1024;
/** `GET /queue` carries every queued prompt in full. */
const QUEUE_MAX_BYTES = 32 * 1024 * 1024;
const HISTORY_MAX_BYTES = 16 * 1024 * 1024;

/** What an engine of the server shares with the server's other routes. */
export interface ComfyConnection {
  http: RemoteHttp;
  socket: ComfySocket;
}

/** One entry of `GET /history/{prompt_id}`. */
interface HistoryEntry {
  outputs?: Record<string, { images?: { filename?: unknown; subfolder?: unknown; type?: unknown }[] }>;
  status?: { status_str?: unknown; completed?: unknown; messages?: [string, Record<string, unknown>][] };
}

/** The job's prompt of this attempt: its run number, and its id once one is sent. */
interface Active {
  run: number;
  promptId?: string;
}

/** Where a prompt is on the server: queued or running, finished (with its history), or gone (a restart lost it). */
type Whereabouts = { kind: 'active' } | { kind: 'finished'; entry: HistoryEntry } | { kind: 'gone' };

/**
 * Runs one route's workflow on a ComfyUI server (ENGINES.md, "comfyui"): uploads the job's images into a subfolder
 * of its own, queues the workflow with the job's values and seed under a prompt id derived from the job, follows it
 * on the process's shared websocket (with `GET /queue` and `GET /history/{id}` when the socket is down or a message
 * was lost), and fetches the output node's first image with `GET /view`. The prompt id is kept in the job's run
 * record, so an attempt after a dead worker follows the prompt already queued instead of running it twice.
 */
export class ComfyEngine implements Engine {
  /**
   * Set once the server was found to have every node class of the workflow, with the seeds the route's seed input
   * takes (a failed check is redone).
   */
  private checked: Promise<SeedRange> | undefined;
  private readonly nodeCount: number;

  constructor(
    private readonly route: ComfyRoute,
    private readonly server: ComfyConnection,
  ) {
    this.nodeCount = Object.keys(route.workflow).length;
  }

  async generate(request: EngineRequest): Promise<Extract<EngineImage, { kind: 'encoded' }>[]> {
    request.signal?.throwIfAborted();
    this.checked ??= this.checkNodeClasses().catch((error: unknown) => {
      this.checked = undefined;
      throw error;
    });
    const seeds = await abortable(this.checked, request.signal);
    const images = await this.run(request, seeds);
    for (const data of images) await this.server.http.verifyImage(data);
    return images.map((data) => ({ kind: 'encoded', data }));
  }

  /**
   * A class the server lacks (a custom node not installed) fails the job naming it, before anything is uploaded; so
   * does a route's output node that is no output node (a VAEDecode, say): ComfyUI keeps only output nodes' images, so
   * the job would fail only after the whole run on the GPU. So does a seed input that takes no seed; one that declares
   * a range (a custom node's seed may stop at 2^32 - 1) has the job's seed drawn within it, or ComfyUI would refuse it.
   */
  private async checkNodeClasses(): Promise<SeedRange> {
    const known = await this.server.http.json<Record<string, NodeClassInfo | undefined>>({
      method: 'GET',
      path: '/object_info',
      maxBytes: OBJECT_INFO_MAX_BYTES,
    });
    const missing = [...new Set(Object.values(this.route.workflow).map((node) => node.class_type))].filter(
      (name) => !Object.hasOwn(known, name),
    );
    if (missing.length > 0) {
      const names = missing.map((name) => `"${name}"`).join(', ');
      throw engineFailed(
        `ComfyUI has no node class ${names} that ${this.route.workflowFile} uses (a custom node not installed)`,
        `The ComfyUI server has no node class ${names} that the workflow needs: install the custom node that provides it.`,
      );
    }
    const { node } = this.route.output;
    const type = this.route.workflow[node].class_type;
    if (known[type]?.output_node !== true) {
      throw this.routeMistake(
        `output.node: node "${node}" is a ${type}, not an output node (such as SaveImage or PreviewImage) whose image ComfyUI keeps`,
      );
    }
    const { seed } = this.route;
    if (!seed) return ANY_SEED;
    const seedType = this.route.workflow[seed.node].class_type;
    const seeds = seedRangeOf(known[seedType], seed.input);
    if ('problem' in seeds) throw this.routeMistake(`seed: node "${seed.node}" is a ${seedType}, ${seeds.problem}`);
    return seeds;
  }

  /** A setting of the route (`what`, from its key down) that the server's node classes refuse. */
  private routeMistake(what: string): PermanentEngineError {
    const where = `routes.${this.route.key}.${what}`;
    return engineFailed(`${where} (${this.route.workflowFile})`, `${where}.`);
  }

  /**
   * The output image's bytes: from the prompt an earlier attempt queued, or from a new one. A prompt stopped here (the
   * job ended or timed out) is recorded as such, so that the job's next attempt, if any, queues the next run under an
   * id of its own instead of finding the stopped prompt's history. At the worker's shutdown the prompt is left to run,
   * its record as it was, for the next attempt to follow.
   */
  private async run(request: EngineRequest, seeds: SeedRange): Promise<Buffer[]> {
    const { signal } = request;
    const active: Active = { run: 1 };
    try {
      let lost = 0;
      const recorded = decodeRun(await request.runs?.recall());
      if (recorded?.state === 'stopped') {
        active.run = recorded.run + 1;
      } else if (recorded) {
        await request.slot?.take();
        const resumed = await this.resume(recorded, request, active);
        if (resumed.kind === 'finished') return await this.outputOnceDone(resumed.entry, request);
        // Not on the server: nothing to stop or hand over until it is queued again.
        active.promptId = undefined;
        // A prompt the server confirmed and then lost went with a restart; one never confirmed is sent again as it was.
        if (recorded.state === 'queued') {
          lost++;
          active.run = recorded.run + 1;
        }
      }
      for (; ; active.run++) {
        const outcome = await this.queueAndFollow(request, active, seeds);
        if (outcome.kind === 'finished') return await this.outputOnceDone(outcome.entry, request);
        if (++lost > LOSSES_ALLOWED) {
          throw engineFailed(
            `ComfyUI lost the job's prompt ${lost} times (the server restarted while it ran)`,
            `The ComfyUI server restarted ${lost} times while the job ran.`,
          );
        }
      }
    } catch (error) {
      if (handsOver(signal) && active.promptId) throw new RunHandedOver(`ComfyUI prompt ${active.promptId}`);
      if (signal?.aborted && active.promptId) {
        await cancelPrompt(this.server.http, active.promptId);
        const stopped = encodeRun({ promptId: active.promptId, run: active.run, state: 'stopped' });
        await request.runs?.remember(stopped).catch(() => undefined);
      }
      throw error;
    }
  }

  /** The prompt's output, its turn on the server given back first: fetching the image is not the GPU's work. */
  private async outputOnceDone(entry: HistoryEntry, request: EngineRequest): Promise<Buffer[]> {
    await request.slot?.free();
    return this.outputs(entry, request.outputs ?? 1, request.signal);
  }

  /** An earlier attempt's prompt, queued or being sent: followed if queued or running, read if finished. */
  private async resume(
    recorded: RecordedRun,
    request: EngineRequest,
    active: Active,
  ): Promise<{ kind: 'finished'; entry: HistoryEntry } | { kind: 'gone' }> {
    active.promptId = recorded.promptId;
    active.run = recorded.run;
    return this.follow(this.server.socket.watch(recorded.promptId), request, false);
  }

  private async queueAndFollow(
    request: EngineRequest,
    active: Active,
    seeds: SeedRange,
  ): Promise<{ kind: 'finished'; entry: HistoryEntry } | { kind: 'gone' }> {
    const { http, socket } = this.server;
    const { run } = active;
    const uploads = await this.upload(request);
    // The inputs are on the server: the job takes its turn on the GPU to queue them.
    await request.slot?.take();
    const prompt = buildPrompt(this.route, request, uploads, seeds);
    const promptId = promptIdFor(request.jobId, run);
    await request.runs?.remember(encodeRun({ promptId, run, state: 'sending' }));
    active.promptId = promptId;
    // Messages go to the client id the prompt was queued with: the socket must be open first not to miss any.
    await abortable(socket.ready(SOCKET_WAIT_MS), request.signal);
    let watch = socket.watch(promptId);
    try {
      // Not repeated blindly: a second POST could queue the workflow twice. The next attempt looks it up first.
      const { status, body } = await http.request({
        method: 'POST',
        path: '/prompt',
        body: { prompt, client_id: socket.clientId, prompt_id: promptId },
        retry: false,
        answerStatuses: [400],
        signal: request.signal,
      });
      const answer = parseJson(body) as { prompt_id?: unknown } | undefined;
      if (status === 400) {
        const reason = describeRefusal(answer);
        throw engineFailed(`ComfyUI refused the workflow ${this.route.workflowFile}: ${reason}`, reason);
      }
      // Servers older than client-chosen ids mint their own; the prompt is then followed under that one.
      const queued = typeof answer?.prompt_id === 'string' ? answer.prompt_id : promptId;
      if (queued !== promptId) {
        watch.close();
        watch = socket.watch(queued);
      }
      active.promptId = queued;
      await request.runs?.remember(encodeRun({ promptId: queued, run, state: 'queued' }));
      const found = await this.follow(watch, request, true);
      return found.kind === 'finished' ? found : { kind: 'gone' };
    } finally {
      // Whatever ended the attempt (a refusal, a failed write of the run), the socket stops keeping its messages.
      watch.close();
    }
  }

  /** Each image input into `input/<job id>/<input name>.<ext>`, replacing what an earlier attempt uploaded. */
  private async upload(request: EngineRequest): Promise<Record<string, UploadedImage>> {
    const uploads: Record<string, UploadedImage> = {};
    for (const name of Object.keys(this.route.inputs)) {
      const image = request.images[name];
      if (!image) continue;
      const format = imageFormatOf(image);
      if (!format) {
        throw new PermanentEngineError(
          'invalid_image',
          `input image '${quote(name, 60)}' is not a JPEG, PNG or WebP file`,
        );
      }
      const form = new FormData();
      const filename = `${name}.${format === 'jpeg' ? 'jpg' : format}`;
      form.append('image', new Blob([image], { type: IMAGE_MIME_TYPES[format] }), filename);
      form.append('type', 'input');
      form.append('subfolder', request.jobId);
      form.append('overwrite', 'true');
      const answer = await this.server.http.json<{ name?: unknown; subfolder?: unknown }>({
        method: 'POST',
        path: '/upload/image',
        body: form,
        signal: request.signal,
      });
      uploads[name] = {
        name: typeof answer.name === 'string' ? answer.name : filename,
        subfolder: typeof answer.subfolder === 'string' ? answer.subfolder : request.jobId,
      };
    }
    return uploads;
  }

  /**
   * Waits for the prompt to end: the socket's messages give progress and the end; lookups over HTTP find the end when
   * the socket was down or reconnected, and find the prompt gone when the server restarted without it.
   */
  private follow(
    watch: PromptWatch,
    request: EngineRequest,
    queuedHere: boolean,
  ): Promise<Whereabouts & { kind: 'finished' | 'gone' }> {
    const { signal, onProgress } = request;
    const progress = new PromptProgress(this.nodeCount);
    return new Promise((resolve, reject) => {
      let settled = false;
      let looking = false;
      let ending = false;
      let failures = 0;
      let timer: NodeJS.Timeout | undefined;
      const settle = (done: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        watch.close();
        signal?.removeEventListener('abort', aborted);
        done();
      };
      const schedule = () => {
        if (settled) return;
        clearTimeout(timer);
        const delay = ending ? POLL_ENDING_MS : queuedHere && this.server.socket.isOpen ? POLL_OPEN_MS : POLL_BLIND_MS;
        timer = setTimeout(() => void lookUp(), delay);
      };
      const lookUp = async () => {
        if (settled || looking) return;
        looking = true;
        try {
          const found = await this.whereabouts(watch.promptId, signal);
          failures = 0;
          if (found.kind !== 'active') settle(() => resolve(found));
        } catch (error) {
          if (signal?.aborted) return;
          if (!(error instanceof TransientEngineError) || ++failures >= LOOKUP_FAILURES_ALLOWED) {
            const failure = error instanceof Error ? error : new Error(String(error));
            settle(() => reject(failure));
          }
        } finally {
          looking = false;
          schedule();
        }
      };
      const report = (fraction: number) => onProgress?.(fraction);
      // The server is done with the prompt: the next job may have it while this one looks up and fetches the output.
      const modelDone = () => void request.slot?.free();
      const message = ({ type, data }: ComfyMessage) => {
        switch (type) {
          case 'execution_cached':
            report(progress.cached(Array.isArray(data.nodes) ? data.nodes.map(String) : []));
            break;
          case 'executing':
            if (data.node === null || data.node === undefined) {
              ending = true;
              modelDone();
              void lookUp();
            } else report(progress.executing(typeof data.node === 'string' ? data.node : JSON.stringify(data.node)));
            break;
          case 'progress':
            report(progress.sampled(Number(data.value), Number(data.max)));
            break;
          case 'execution_success':
          case 'execution_interrupted':
            ending = true;
            modelDone();
            void lookUp();
            break;
          case 'execution_error':
            settle(() => reject(executionError(data)));
            break;
        }
      };
      const aborted = () => settle(() => reject(signal!.reason as Error));
      if (signal?.aborted) return aborted();
      signal?.addEventListener('abort', aborted, { once: true });
      watch.listen({
        message,
        reconnected: () => void lookUp(),
        dropped: schedule,
      });
      void lookUp();
    });
  }

  /**
   * History, then queue, then history again: ComfyUI moves a finished prompt from its queue to its history at once, so
   * a prompt in neither was lost (the server restarted). A finished prompt, the usual case, takes one request.
   */
  private async whereabouts(promptId: string, signal: AbortSignal | undefined): Promise<Whereabouts> {
    const finished = await this.history(promptId, signal);
    if (finished) return finished;
    const queue = await this.server.http.json<{ queue_running?: unknown; queue_pending?: unknown }>({
      method: 'GET',
      path: '/queue',
      maxBytes: QUEUE_MAX_BYTES,
      signal,
    });
    if (queued(queue.queue_running, promptId) || queued(queue.queue_pending, promptId)) return { kind: 'active' };
    return (await this.history(promptId, signal)) ?? { kind: 'gone' };
  }

  private async history(promptId: string, signal: AbortSignal | undefined): Promise<Whereabouts | undefined> {
    const history = await this.server.http.json<Record<string, HistoryEntry | undefined>>({
      method: 'GET',
      path: `/history/${encodeURIComponent(promptId)}`,
      maxBytes: HISTORY_MAX_BYTES,
      signal,
    });
    const entry = history[promptId];
    return entry ? { kind: 'finished', entry } : undefined;
  }

  /**
   * The output node's images, at most `wanted` (a batch gives one per latent), each read with `GET /view`; a failed or
   * interrupted prompt fails the job.
   */
  private async outputs(entry: HistoryEntry, wanted: number, signal: AbortSignal | undefined): Promise<Buffer[]> {
    const messages = Array.isArray(entry.status?.messages) ? entry.status.messages : [];
    const failure = messages.find(([type]) => type === 'execution_error');
    if (failure) throw executionError(failure[1]);
    if (messages.some(([type]) => type === 'execution_interrupted')) {
      throw engineFailed('ComfyUI interrupted the prompt', 'The prompt was interrupted on the ComfyUI server.');
    }
    if (entry.status?.status_str === 'error') throw engineFailed('ComfyUI ended the prompt with an error');
    const node = this.route.output.node;
    const images = (entry.outputs?.[node]?.images ?? []).slice(0, wanted);
    if (images.length === 0 || images.some((image) => typeof image.filename !== 'string')) {
      const kind = this.route.workflow[node]?.class_type ?? 'node';
      throw engineFailed(
        `ComfyUI's output node ${node} (${kind}) of ${this.route.workflowFile} gave no image`,
        `The workflow's output node ${node} (${kind}) gave no image.`,
      );
    }
    const read: Buffer[] = [];
    for (const image of images) {
      const view = this.server.http.url('/view');
      view.search = new URLSearchParams({
        filename: image.filename as string,
        subfolder: typeof image.subfolder === 'string' ? image.subfolder : '',
        type: typeof image.type === 'string' ? image.type : 'output',
      }).toString();
      read.push(await this.server.http.download(view.toString(), signal));
    }
    return read;
  }
}

/**
 * The job ended (canceled, deleted, timed out, shutdown), or its prompt was abandoned between attempts: the prompt
 * leaves the queue if still there, and is interrupted only if it is the one running (`/interrupt` takes a `prompt_id`
 * on recent servers; older ones interrupt whatever runs, so it is asked only when this prompt is the one).
 */
export async function cancelPrompt(http: RemoteHttp, promptId: string): Promise<void> {
  const signal = AbortSignal.timeout(CANCEL_TIMEOUT_MS);
  const once = { retry: false, signal } as const;
  try {
    await http.request({ method: 'POST', path: '/queue', body: { delete: [promptId] }, ...once });
    const queue = await http.json<{ queue_running?: unknown }>({
      method: 'GET',
      path: '/queue',
      maxBytes: QUEUE_MAX_BYTES,
      ...once,
    });
    if (queued(queue.queue_running, promptId)) {
      await http.request({ method: 'POST', path: '/interrupt', body: { prompt_id: promptId }, ...once });
    }
  } catch {
    // The job has ended whatever the server answers; an unreachable server has nothing to stop.
  }
}

/** Whether a `GET /queue` list (`[number, prompt_id, prompt, extra_data, outputs, ...]` items) holds the prompt. */
function queued(list: unknown, promptId: string): boolean {
  return Array.isArray(list) && list.some((item) => Array.isArray(item) && item[1] === promptId);
}

/** `execution_error`'s data: the failing node's class and id, and the exception's message, for the client too. */
function executionError(data: Record<string, unknown>): PermanentEngineError {
  const node = `${typeof data.node_type === 'string' ? data.node_type : 'node'} ${String(data.node_id)}`;
  const text = typeof data.exception_message === 'string' ? data.exception_message : 'unknown error';
  return engineFailed(`ComfyUI failed the prompt at ${node}: ${quote(text)}`, `${node}: ${text}`);
}

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
}

/** `promise`, or the signal's reason as soon as it fires. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const aborted = () => reject(signal.reason as Error);
    signal.addEventListener('abort', aborted, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', aborted));
  });
}
