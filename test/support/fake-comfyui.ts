import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import sharp from 'sharp';
import { WebSocketServer, type WebSocket } from 'ws';

/**
 * A stand-in for a ComfyUI server, written from comfyanonymous/ComfyUI's (Comfy-Org/ComfyUI) `server.py` (the routes,
 * each also under `/api/`, and their answers; `object_info`'s `node_info`), `nodes.py` (the core classes'
 * `INPUT_TYPES`), `execution.py` (`validate_prompt`'s 400 `{error, node_errors}`, `validate_inputs`' checks,
 * `missing_node_type`, the messages `execution_start`, `execution_cached`, `executing` (with `node: null` at the end),
 * `executed`, `execution_success`, `execution_error`, `execution_interrupted`, the history entry `{prompt, outputs,
 * status: {status_str, completed, messages}}`) and `main.py` (`progress` `{value, max, prompt_id, node}` per sampler
 * step, messages sent to the prompt's `client_id` socket only). As recent servers do, `POST /prompt` takes a client's
 * `prompt_id` (a canonical UUID) and `/interrupt` a `prompt_id` (interrupting only when that prompt runs).
 *
 * Strict like the real one: a LoadImage naming a file not uploaded is a 400 with `node_errors`; so is an INT or FLOAT
 * value that is no number or lies outside its input's `min`/`max` (`validate_inputs`: `invalid_input_type`,
 * `value_smaller_than_min`, `value_bigger_than_max`, each with the input's name and spec); a class not in its
 * `object_info` is a 400 `missing_node_type`; prompts run `slots` at a time (one, as ComfyUI does), the rest wait in
 * the queue. `object_info` gives each class's inputs as `nodes.py` declares them (KSampler's seed up to 2^64 - 1,
 * written exactly as Python's JSON does), only those whose values it checks (numbers, LoadImage's files); a test adds a
 * custom class with its own. Running a prompt is simulated: each node in order, a KSampler's steps over time, and the
 * output node saves the first loaded image tinted (or a plain image) where `/view` serves it.
 */

/** An input's spec in `object_info`: its type (a name, or a list of choices) and options such as `min` and `max`. */
export type FakeComfyInputSpec = [type: string | string[], options?: Record<string, unknown>];

/** A node class's inputs as `INPUT_TYPES` declares them (the inputs a test leaves out are not checked). */
export interface FakeComfyInputs {
  required?: Record<string, FakeComfyInputSpec>;
  optional?: Record<string, FakeComfyInputSpec>;
}

interface FakeComfyClass {
  output: boolean;
  inputs: FakeComfyInputs;
}

/** Core node classes the fake knows: whether each is an output node, and the inputs it checks, as nodes.py has them. */
const CORE_CLASSES: Record<string, FakeComfyClass> = {
  LoadImage: { output: false, inputs: {} },
  LoadImageMask: { output: false, inputs: {} },
  ImageScaleBy: {
    output: false,
    inputs: { required: { scale_by: ['FLOAT', { default: 1.0, min: 0.01, max: 8.0, step: 0.01 }] } },
  },
  ImageScale: { output: false, inputs: {} },
  ImageInvert: { output: false, inputs: {} },
  ImageCompositeMasked: { output: false, inputs: {} },
  CheckpointLoaderSimple: { output: false, inputs: {} },
  CLIPTextEncode: { output: false, inputs: {} },
  EmptyLatentImage: {
    output: false,
    // nodes.py: width and height in steps of 8, batch_size up to 4096; a batch gives the output node that many images.
    inputs: { required: { batch_size: ['INT', { default: 1, min: 1, max: 4096 }] } },
  },
  VAEEncode: { output: false, inputs: {} },
  VAEDecode: { output: false, inputs: {} },
  KSampler: {
    output: false,
    inputs: {
      required: {
        seed: ['INT', { default: 0, min: 0, max: 0xffffffffffffffffn }],
        steps: ['INT', { default: 20, min: 1, max: 10000 }],
        cfg: ['FLOAT', { default: 8.0, min: 0.0, max: 100.0, step: 0.1, round: 0.01 }],
        denoise: ['FLOAT', { default: 1.0, min: 0.0, max: 1.0, step: 0.01 }],
      },
    },
  },
  SaveImage: { output: true, inputs: {} },
  PreviewImage: { output: true, inputs: {} },
};

export interface FakeComfyPrompt {
  promptId: string;
  clientId: string | undefined;
  prompt: Record<string, { class_type: string; inputs: Record<string, unknown> }>;
  state: 'pending' | 'running' | 'success' | 'error' | 'interrupted' | 'deleted' | 'lost';
  /** performance.now() when it was queued and when it ended. */
  queuedAt: number;
  /** When it left the queue to run, and when it ended (performance.now()). */
  startedAt?: number;
  endedAt?: number;
}

export interface FakeComfyUpload {
  filename: string;
  subfolder: string;
  type: string;
  overwrite: string | undefined;
}

/** Each way the real server fails, switched on by a test. */
export interface FakeComfySwitches {
  /** Prompts are refused with a validation error on this node (as a bad `ckpt_name` would be). */
  nodeError?: { node: string; message: string; details: string };
  /** The prompt fails while running this node, with this exception message. */
  executionError?: { node: string; message: string };
  /** Sampler steps per KSampler, and the time each takes. */
  steps: number;
  stepMs: number;
  /** Time taken by every other node. */
  nodeMs: number;
  /** Every websocket is closed at this sampler step, and new ones refused for `refuseMs`. */
  dropSocketAtStep?: { step: number; refuseMs: number };
  /** The server restarts at this sampler step: running and queued prompts and history are lost, sockets closed. */
  restartAtStep?: number;
  /**
   * The server restarts once a prompt has sent its end messages, before it answers another request: the client was told
   * the prompt ended, and finds it in neither the history nor the queue. Goes off once it has happened.
   */
  restartAfterEnd?: boolean;
  /** Prompts run at once (ComfyUI runs one). */
  slots: number;
  /**
   * The answer to `POST /prompt` is sent this long after the prompt started: ComfyUI's executor runs in its own thread,
   * so its first messages can reach the socket before the HTTP answer reaches the client.
   */
  promptAnswerDelayMs?: number;
}

export interface FakeComfy {
  url: string;
  switches: FakeComfySwitches;
  prompts: FakeComfyPrompt[];
  uploads: FakeComfyUpload[];
  interrupts: { promptId: string | undefined; interrupted: boolean }[];
  queueDeletes: string[];
  wsConnections: { clientId: string; headers: IncomingMessage['headers'] }[];
  /** Every HTTP request's method, path and headers. */
  requests: { method: string; path: string; headers: IncomingMessage['headers'] }[];
  /** Each `progress` message sent: when (performance.now()), to which prompt, its value and max. */
  progressSent: { promptId: string; value: number; max: number; at: number }[];
  /** Most prompts queued or running at once over the fake's life. */
  maxInFlight: number;
  /** A custom node class the server has from now on, with the inputs `object_info` declares and `/prompt` checks. */
  addClass(name: string, inputs?: FakeComfyInputs): void;
  /** Stops answering (connections refused) until {@link up}. */
  down(): Promise<void>;
  up(): Promise<void>;
  waitFor(predicate: (fake: FakeComfy) => boolean, what: string, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

interface Task {
  record: FakeComfyPrompt;
  interrupted: boolean;
  /** The server restarted under it: it stops without a trace. */
  lost: boolean;
  executed: string[];
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export async function startFakeComfy(initial: Partial<FakeComfySwitches> = {}): Promise<FakeComfy> {
  const switches: FakeComfySwitches = { steps: 4, stepMs: 20, nodeMs: 2, slots: 1, ...initial };
  const classes = new Map(Object.entries(CORE_CLASSES));
  const files = new Map<string, Buffer>();
  const pending: Task[] = [];
  const running = new Set<Task>();
  let history = new Map<string, Record<string, unknown>>();
  const sockets = new Map<string, WebSocket>();
  let refuseSocketsUntil = 0;
  let outputCount = 0;
  /** A prompt that just ended on a server about to restart (`restartAfterEnd`). */
  let endedBeforeRestart: FakeComfyPrompt | undefined;
  const timers = new Set<NodeJS.Timeout>();
  const connections = new Set<Socket>();

  const fake: FakeComfy = {
    url: '',
    switches,
    prompts: [],
    uploads: [],
    interrupts: [],
    queueDeletes: [],
    wsConnections: [],
    requests: [],
    progressSent: [],
    maxInFlight: 0,
    addClass: (name, inputs = {}) => classes.set(name, { output: false, inputs }),
    down: async () => {
      await stopListening();
    },
    up: async () => {
      await listen(port);
    },
    waitFor: async (predicate, what, timeoutMs = 10_000) => {
      const until = Date.now() + timeoutMs;
      while (!predicate(fake)) {
        if (Date.now() > until) throw new Error(`fake ComfyUI: timed out waiting for ${what}`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    },
    close: async () => {
      for (const timer of timers) clearTimeout(timer);
      await stopListening();
      wss.close();
    },
  };

  const sleep = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        timers.delete(timer);
        resolve();
      }, ms);
      timers.add(timer);
    });

  function send(clientId: string | undefined, type: string, data: Record<string, unknown>): void {
    const message = JSON.stringify({ type, data });
    if (clientId === undefined) for (const socket of sockets.values()) socket.send(message);
    else sockets.get(clientId)?.send(message);
  }

  function queueInfo() {
    return { exec_info: { queue_remaining: pending.length + running.size } };
  }

  function queueItem(task: Task) {
    const { record } = task;
    return [0, record.promptId, record.prompt, { client_id: record.clientId }, [], {}];
  }

  function dropSockets(refuseMs: number): void {
    refuseSocketsUntil = Date.now() + refuseMs;
    for (const socket of sockets.values()) socket.terminate();
    sockets.clear();
  }

  function restart(): void {
    for (const task of [...pending, ...running]) {
      task.lost = true;
      task.record.state = 'lost';
    }
    pending.length = 0;
    running.clear();
    history = new Map();
    dropSockets(0);
  }

  /** Starts queued prompts while slots are free. */
  function pump(): void {
    while (running.size < switches.slots && pending.length > 0) {
      const task = pending.shift()!;
      running.add(task);
      task.record.state = 'running';
      task.record.startedAt = performance.now();
      void execute(task).finally(() => {
        running.delete(task);
        task.record.endedAt = performance.now();
        pump();
      });
    }
  }

  function order(prompt: FakeComfyPrompt['prompt']): string[] {
    const done: string[] = [];
    const visit = (id: string) => {
      if (done.includes(id)) return;
      for (const value of Object.values(prompt[id].inputs)) {
        if (Array.isArray(value) && typeof value[0] === 'string' && prompt[value[0]]) visit(value[0]);
      }
      done.push(id);
    };
    for (const id of Object.keys(prompt)) visit(id);
    return done;
  }

  async function execute(task: Task): Promise<void> {
    const { record } = task;
    const { promptId, clientId, prompt } = record;
    const messages: [string, Record<string, unknown>][] = [];
    const message = (type: string, data: Record<string, unknown>) => {
      const full = { ...data, prompt_id: promptId, timestamp: Date.now() };
      messages.push([type, full]);
      send(clientId, type, full);
    };
    message('execution_start', {});
    message('execution_cached', { nodes: [] });
    const outputs: Record<string, unknown> = {};
    let loaded: Buffer | undefined;
    let globalStep = 0;
    for (const node of order(prompt)) {
      if (task.lost) return;
      const kind = prompt[node].class_type;
      send(clientId, 'executing', { node, display_node: node, prompt_id: promptId });
      await sleep(switches.nodeMs);
      if (kind === 'KSampler') {
        for (let value = 1; value <= switches.steps; value++) {
          await sleep(switches.stepMs);
          if (task.lost || task.interrupted) break;
          globalStep++;
          if (switches.restartAtStep === globalStep) {
            restart();
            return;
          }
          send(clientId, 'progress', { value, max: switches.steps, prompt_id: promptId, node });
          fake.progressSent.push({ promptId, value, max: switches.steps, at: performance.now() });
          if (switches.dropSocketAtStep?.step === globalStep) dropSockets(switches.dropSocketAtStep.refuseMs);
        }
      }
      if (task.lost) return;
      if (task.interrupted) {
        message('execution_interrupted', { node_id: node, node_type: kind, executed: task.executed });
        return finish('error', false);
      }
      if (switches.executionError?.node === node) {
        message('execution_error', {
          node_id: node,
          node_type: kind,
          executed: task.executed,
          exception_message: switches.executionError.message,
          exception_type: 'RuntimeError',
          traceback: [],
          current_inputs: {},
          current_outputs: {},
        });
        return finish('error', false);
      }
      if (kind === 'LoadImage' && !loaded) loaded = files.get(`input/${String(prompt[node].inputs.image)}`);
      if (classes.get(kind)?.output) {
        // SaveImage writes each image of the batch under a counter of its own, listed in order in `images`.
        const images = [];
        for (let item = 0; item < batchSizeOf(prompt); item++) {
          outputCount++;
          const filename = `ComfyUI_${String(outputCount).padStart(5, '0')}_.png`;
          const image = loaded
            ? sharp(loaded).tint({ r: 255, g: 120, b: 40 + item * 50 })
            : sharp({
                create: { width: 64, height: 64, channels: 3, background: { r: 200, g: 90, b: 30 + item * 50 } },
              });
          files.set(`output//${filename}`, await image.png().toBuffer());
          images.push({ filename, subfolder: '', type: 'output' });
        }
        outputs[node] = { images };
        send(clientId, 'executed', { node, display_node: node, output: { images }, prompt_id: promptId });
      }
      task.executed.push(node);
    }
    send(clientId, 'executing', { node: null, prompt_id: promptId });
    message('execution_success', {});
    finish('success', true);
    if (switches.restartAfterEnd) {
      switches.restartAfterEnd = false;
      endedBeforeRestart = record;
    }

    function finish(status: 'success' | 'error', completed: boolean): void {
      if (task.lost) return;
      record.state = status === 'success' ? 'success' : task.interrupted ? 'interrupted' : 'error';
      history.set(promptId, {
        prompt: queueItem(task),
        outputs,
        status: { status_str: status, completed, messages },
        meta: {},
      });
    }
  }

  /** `execution.validate_prompt`: the answer to a prompt it refuses, or undefined. */
  function validate(
    prompt: unknown,
  ): { error: Record<string, unknown>; node_errors: Record<string, unknown> } | undefined {
    if (typeof prompt !== 'object' || prompt === null) {
      return {
        error: { type: 'invalid_prompt', message: 'Invalid prompt', details: '', extra_info: {} },
        node_errors: {},
      };
    }
    const nodes = prompt as Record<
      string,
      { class_type?: unknown; inputs?: Record<string, unknown>; _meta?: { title?: string } }
    >;
    for (const [id, node] of Object.entries(nodes)) {
      const kind = node.class_type;
      if (typeof kind !== 'string' || !classes.has(kind)) {
        const title = node._meta?.title ?? kind;
        return {
          error: {
            type: 'missing_node_type',
            message: `Node '${String(title)}' not found. The custom node may not be installed.`,
            details: `Node ID '#${id}'`,
            extra_info: { node_id: id, class_type: kind, node_title: title },
          },
          node_errors: {},
        };
      }
    }
    const outputs = Object.keys(nodes).filter((id) => classes.get(nodes[id].class_type as string)?.output);
    if (outputs.length === 0) {
      return {
        error: { type: 'prompt_no_outputs', message: 'Prompt has no outputs', details: '', extra_info: {} },
        node_errors: {},
      };
    }
    const nodeErrors: Record<string, unknown> = {};
    for (const [id, node] of Object.entries(nodes)) {
      const errors = numberErrors(classes.get(node.class_type as string)!.inputs, node.inputs ?? {});
      if (node.class_type === 'LoadImage' && !files.has(`input/${String(node.inputs?.image)}`)) {
        errors.push({
          type: 'custom_validation_failed',
          message: 'Custom validation failed for node',
          details: `image - Invalid image file: ${String(node.inputs?.image)}`,
          extra_info: { input_name: 'image' },
        });
      }
      if (switches.nodeError?.node === id) {
        errors.push({
          type: 'value_not_in_list',
          message: switches.nodeError.message,
          details: switches.nodeError.details,
          extra_info: {},
        });
      }
      if (errors.length > 0) nodeErrors[id] = { errors, dependent_outputs: outputs, class_type: node.class_type };
    }
    if (Object.keys(nodeErrors).length === 0) return undefined;
    return {
      error: {
        type: 'prompt_outputs_failed_validation',
        message: 'Prompt outputs failed validation',
        details: '',
        extra_info: {},
      },
      node_errors: nodeErrors,
    };
  }

  /** LoadImage's `image`: a choice of the files at the top of the input folder, where uploads without a subfolder go. */
  function loadImageSpec(): FakeComfyInputSpec {
    const names = [...files.keys()]
      .filter((key) => /^input\/[^/]+$/.test(key))
      .map((key) => key.slice('input/'.length));
    return [names.sort(), { image_upload: true }];
  }

  async function readBody(request: IncomingMessage): Promise<Buffer> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  function json(response: ServerResponse, status: number, body: unknown): void {
    response.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8' }).end(pythonJson(body));
  }

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? '/', 'http://fake');
    const path = url.pathname.replace(/^\/api(?=\/)/, '');
    const method = request.method ?? 'GET';
    fake.requests.push({ method, path, headers: request.headers });
    if (endedBeforeRestart) {
      endedBeforeRestart.state = 'lost';
      endedBeforeRestart = undefined;
      restart();
    }
    const route = `${method} ${path}`;

    if (route === 'GET /system_stats') {
      return json(response, 200, {
        system: {
          os: 'posix',
          ram_total: 0,
          ram_free: 0,
          comfyui_version: 'fake',
          python_version: '3',
          embedded_python: false,
        },
        devices: [],
      });
    }
    if (route === 'GET /object_info') {
      const info: Record<string, unknown> = {};
      for (const [name, { output, inputs }] of classes) {
        const required = name === 'LoadImage' ? { ...inputs.required, image: loadImageSpec() } : inputs.required;
        info[name] = {
          input: { required: required ?? {}, ...(inputs.optional && { optional: inputs.optional }) },
          output: [],
          name,
          display_name: name,
          category: 'fake',
          output_node: output,
        };
      }
      return json(response, 200, info);
    }
    if (route === 'POST /upload/image') {
      const form = await new Response(await readBody(request), {
        headers: { 'content-type': request.headers['content-type'] ?? '' },
      })
        .formData()
        .catch(() => undefined);
      const image = form?.get('image');
      if (!form || !(image instanceof Blob) || !('name' in image) || !image.name)
        return void response.writeHead(400).end();
      const type = (form.get('type') as string | null) ?? 'input';
      const subfolder = (form.get('subfolder') as string | null) ?? '';
      const overwrite = (form.get('overwrite') as string | null) ?? undefined;
      if (type !== 'input' || subfolder.includes('..')) return void response.writeHead(400).end();
      const name = String(image.name);
      fake.uploads.push({ filename: name, subfolder, type, overwrite });
      files.set(`input/${subfolder ? `${subfolder}/` : ''}${name}`, Buffer.from(await image.arrayBuffer()));
      return json(response, 200, { name, subfolder, type });
    }
    if (route === 'GET /view') {
      const filename = url.searchParams.get('filename') ?? '';
      if (!filename || filename.startsWith('/') || filename.includes('..')) return void response.writeHead(400).end();
      const type = url.searchParams.get('type') ?? 'output';
      const subfolder = url.searchParams.get('subfolder') ?? '';
      const file =
        files.get(`${type}/${subfolder}/${filename}`) ?? (subfolder ? undefined : files.get(`${type}/${filename}`));
      if (!file) return void response.writeHead(404).end();
      response
        .writeHead(200, { 'Content-Type': 'image/png', 'Content-Disposition': `filename="${filename}"` })
        .end(file);
      return;
    }
    if (route === 'POST /prompt') {
      let body: { prompt?: unknown; client_id?: unknown; prompt_id?: unknown };
      try {
        body = JSON.parse((await readBody(request)).toString('utf8')) as typeof body;
      } catch {
        return void response.writeHead(400).end();
      }
      if (!('prompt' in body)) {
        return json(response, 400, {
          error: { type: 'no_prompt', message: 'No prompt provided', details: '', extra_info: {} },
          node_errors: {},
        });
      }
      let promptId: string = randomUUID();
      if (body.prompt_id !== undefined && body.prompt_id !== null) {
        if (typeof body.prompt_id !== 'string' || !UUID.test(body.prompt_id)) {
          return json(response, 400, {
            error: {
              type: 'invalid_prompt_id',
              message: 'prompt_id must be a valid UUID',
              details: '',
              extra_info: {},
            },
            node_errors: {},
          });
        }
        promptId = body.prompt_id;
      }
      const refusal = validate(body.prompt);
      if (refusal) return json(response, 400, refusal);
      const record: FakeComfyPrompt = {
        promptId,
        clientId: typeof body.client_id === 'string' ? body.client_id : undefined,
        prompt: body.prompt as FakeComfyPrompt['prompt'],
        state: 'pending',
        queuedAt: performance.now(),
      };
      fake.prompts.push(record);
      pending.push({ record, interrupted: false, lost: false, executed: [] });
      fake.maxInFlight = Math.max(fake.maxInFlight, pending.length + running.size);
      send(undefined, 'status', { status: queueInfo() });
      pump();
      const number = fake.prompts.length;
      if (switches.promptAnswerDelayMs) await sleep(switches.promptAnswerDelayMs);
      return json(response, 200, { prompt_id: promptId, number, node_errors: {} });
    }
    if (route === 'GET /queue') {
      return json(response, 200, { queue_running: [...running].map(queueItem), queue_pending: pending.map(queueItem) });
    }
    if (route === 'POST /queue') {
      const body = JSON.parse((await readBody(request)).toString('utf8') || '{}') as {
        delete?: string[];
        clear?: boolean;
      };
      for (const id of body.delete ?? []) {
        fake.queueDeletes.push(id);
        const index = pending.findIndex((task) => task.record.promptId === id);
        if (index >= 0) {
          pending[index].record.state = 'deleted';
          pending.splice(index, 1);
        }
      }
      return void response.writeHead(200).end();
    }
    if (route === 'POST /interrupt') {
      let promptId: string | undefined;
      try {
        promptId = (JSON.parse((await readBody(request)).toString('utf8')) as { prompt_id?: string }).prompt_id;
      } catch {
        promptId = undefined;
      }
      const targets = [...running].filter((task) => promptId === undefined || task.record.promptId === promptId);
      for (const task of targets) task.interrupted = true;
      fake.interrupts.push({ promptId, interrupted: targets.length > 0 });
      return void response.writeHead(200).end();
    }
    const historyMatch = /^\/history\/(.+)$/.exec(path);
    if (method === 'GET' && historyMatch) {
      const id = decodeURIComponent(historyMatch[1]);
      const entry = history.get(id);
      return json(response, 200, entry ? { [id]: entry } : {});
    }
    response.writeHead(404, { 'Content-Type': 'text/plain' }).end('404: Not Found');
  }

  const wss = new WebSocketServer({ noServer: true });
  const server: Server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      if (!response.headersSent) response.writeHead(500).end(String(error));
    });
  });
  server.on('connection', (socket) => {
    connections.add(socket);
    socket.on('close', () => connections.delete(socket));
  });
  server.on('upgrade', (request, socket, head) => {
    const url = new URL(request.url ?? '/', 'http://fake');
    if (url.pathname.replace(/^\/api(?=\/)/, '') !== '/ws' || Date.now() < refuseSocketsUntil) {
      socket.end('HTTP/1.1 503 Service Unavailable\r\n\r\n');
      return;
    }
    wss.handleUpgrade(request, socket, head, (ws) => {
      const clientId = url.searchParams.get('clientId') || randomUUID().replace(/-/g, '');
      sockets.get(clientId)?.close();
      sockets.set(clientId, ws);
      fake.wsConnections.push({ clientId, headers: request.headers });
      ws.on('close', () => {
        if (sockets.get(clientId) === ws) sockets.delete(clientId);
      });
      ws.send(JSON.stringify({ type: 'status', data: { status: queueInfo(), sid: clientId } }));
    });
  });

  let port = 0;
  async function listen(at: number): Promise<void> {
    server.listen(at, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as AddressInfo).port;
  }
  async function stopListening(): Promise<void> {
    if (!server.listening) return;
    dropSockets(0);
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of connections) socket.destroy();
    await closed;
  }

  await listen(0);
  fake.url = `http://127.0.0.1:${port}`;
  return fake;
}

/**
 * `validate_inputs`' checks of a node's INT and FLOAT values (links are checked at their source): each value is
 * converted as Python's `int()` or `float()` would, then held to the spec's `min` and `max`.
 */
/** The latent batch a prompt decodes: its EmptyLatentImage's `batch_size`, or 1 for a prompt without one. */
function batchSizeOf(prompt: Record<string, { class_type: unknown; inputs?: Record<string, unknown> }>): number {
  const latent = Object.values(prompt).find((node) => node.class_type === 'EmptyLatentImage');
  const size = Number(latent?.inputs?.batch_size ?? 1);
  return Number.isInteger(size) && size > 0 ? size : 1;
}

function numberErrors(inputs: FakeComfyInputs, values: Record<string, unknown>): Record<string, unknown>[] {
  const errors: Record<string, unknown>[] = [];
  for (const [name, spec] of Object.entries({ ...inputs.required, ...inputs.optional })) {
    const [type, options = {}] = spec;
    const value = values[name];
    if ((type !== 'INT' && type !== 'FLOAT') || value === undefined || Array.isArray(value)) continue;
    const extra = { input_name: name, input_config: spec };
    const converted = pythonNumber(type, value);
    if (typeof converted === 'string') {
      errors.push({
        type: 'invalid_input_type',
        message: `Failed to convert an input value to a ${type} value`,
        details: `${name}, ${typeof value === 'string' ? value : value === null ? 'None' : JSON.stringify(value)}, ${converted}`,
        extra_info: { ...extra, received_value: value, exception_message: converted },
      });
      continue;
    }
    const show = (number: unknown) =>
      type === 'FLOAT' && typeof number === 'number' && Number.isInteger(number) ? number.toFixed(1) : String(number);
    const { min, max } = options as { min?: number | bigint; max?: number | bigint };
    const below = min !== undefined && converted < min;
    const above = max !== undefined && converted > max;
    if (below || above) {
      errors.push({
        type: below ? 'value_smaller_than_min' : 'value_bigger_than_max',
        message: below
          ? `Value ${show(converted)} smaller than min of ${show(min)}`
          : `Value ${show(converted)} bigger than max of ${show(max)}`,
        details: name,
        extra_info: { ...extra, received_value: converted },
      });
    }
  }
  return errors;
}

/** `int(value)` or `float(value)` as Python does it, or the exception's message. */
function pythonNumber(type: 'INT' | 'FLOAT', value: unknown): number | string {
  if (typeof value === 'boolean') return Number(value);
  if (typeof value === 'number') return type === 'INT' ? Math.trunc(value) : value;
  if (typeof value === 'string') {
    const text = value.trim();
    if (type === 'INT' && /^[+-]?\d+$/.test(text)) return Number(text);
    if (type === 'FLOAT' && text !== '' && Number.isFinite(Number(text))) return Number(text);
    return type === 'INT'
      ? `invalid literal for int() with base 10: '${value}'`
      : `could not convert string to float: '${value}'`;
  }
  const pythonType = value === null ? 'NoneType' : 'dict';
  return type === 'INT'
    ? `int() argument must be a string, a bytes-like object or a real number, not '${pythonType}'`
    : `float() argument must be a string or a real number, not '${pythonType}'`;
}

/** JSON as Python writes it: integers past 2^53 (KSampler's seed `max`), held as BigInts, written out exactly. */
function pythonJson(value: unknown): string {
  const text = JSON.stringify(value, (_key, item: unknown) => (typeof item === 'bigint' ? `${BIG}${item}` : item));
  return text.replace(new RegExp(`"${BIG}(\\d+)"`, 'g'), '$1');
}
const BIG = 'bigint:';

/**
 * A routing file (ENGINES.md) that sends the `default` tool to a ComfyUI server at `url` with the img2img example
 * workflow, which the caller copies from docs/routing/workflows into `workflows/` beside the file.
 */
export function img2imgRouting(url: string, engine: { concurrency: number; timeout?: string }): string {
  return `engines:
  comfy:
    kind: comfyui
    url: ${url}
    concurrency: ${engine.concurrency}
${engine.timeout ? `    timeout: ${engine.timeout}\n` : ''}routes:
  default:
    engine: comfy
    workflow: workflows/img2img.json
    inputs:
      image: { node: "2" }
      prompt: { node: "4", input: text }
    output: { node: "8" }
    seed: { node: "6", input: seed }
`;
}
