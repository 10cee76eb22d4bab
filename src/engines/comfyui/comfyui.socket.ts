import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';

/** First wait before reconnecting after the socket closed; doubled each failure up to the maximum. */
const RECONNECT_BASE_MS = 250;
const RECONNECT_MAX_MS = 5_000;

/** A JSON message of ComfyUI's `/ws`: `{type, data}` (binary preview frames are not read). */
export interface ComfyMessage {
  type: string;
  data: Record<string, unknown>;
}

export interface PromptListener {
  /** A message about this prompt (its `data.prompt_id`). */
  message(message: ComfyMessage): void;
  /**
   * The socket (re)opened after having been closed: messages sent meanwhile were lost, so the listener looks its
   * prompt up over HTTP.
   */
  reconnected(): void;
  /** The socket closed: until it reopens, the listener looks its prompt up over HTTP more often. */
  dropped(): void;
}

/**
 * The worker process's one websocket to one ComfyUI server (`/ws?clientId=<this process's id for the server>`),
 * shared by every job on that server: ComfyUI sends a prompt's messages to the client id it was queued with, so the
 * socket routes each message to the job by its `prompt_id`. Opened on first use, reopened with backoff whenever it
 * closes, until {@link close}.
 */
export class ComfySocket {
  /** Sent as `client_id` with every prompt queued by this process. */
  readonly clientId = randomUUID();
  private readonly listeners = new Map<string, Set<PromptWatch>>();
  private socket: WebSocket | undefined;
  private opened: Promise<void> | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  private everOpen = false;
  private closed = false;
  private readonly url: URL;

  /** `base`: the server's base URL (http or https), under which `ws` is the socket's path. */
  constructor(
    base: URL,
    private readonly headers: Readonly<Record<string, string>>,
  ) {
    this.url = new URL('ws', base);
    this.url.protocol = base.protocol === 'https:' ? 'wss:' : 'ws:';
    this.url.search = new URLSearchParams({ clientId: this.clientId }).toString();
  }

  /**
   * Starts keeping one prompt's messages; watch before queueing the prompt, so none sent before the server's answer
   * to the queueing is missed. What comes before {@link PromptWatch.listen} is handed to the listener then.
   */
  watch(promptId: string): PromptWatch {
    let set = this.listeners.get(promptId);
    if (!set) this.listeners.set(promptId, (set = new Set()));
    const watch = new PromptWatch(promptId, () => {
      set.delete(watch);
      if (set.size === 0 && this.listeners.get(promptId) === set) this.listeners.delete(promptId);
    });
    set.add(watch);
    this.ensureOpen();
    return watch;
  }

  /** Resolves true once the socket is open, false if it is not within `timeoutMs` (the caller then polls). */
  async ready(timeoutMs: number): Promise<boolean> {
    this.ensureOpen();
    if (this.socket?.readyState === WebSocket.OPEN) return true;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((resolve) => (timer = setTimeout(resolve, timeoutMs, false)));
    try {
      return await Promise.race([this.opened!.then(() => true), timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  get isOpen(): boolean {
    return this.socket?.readyState === WebSocket.OPEN;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    const socket = this.socket;
    this.socket = undefined;
    if (!socket || socket.readyState === WebSocket.CLOSED) return;
    await new Promise<void>((resolve) => {
      socket.once('close', () => resolve());
      socket.terminate();
    });
  }

  private ensureOpen(): void {
    if (this.closed || this.socket || this.retryTimer) return;
    this.connect();
  }

  private connect(): void {
    let markOpen!: () => void;
    this.opened = new Promise<void>((resolve) => (markOpen = resolve));
    const socket = new WebSocket(this.url, { headers: { ...this.headers }, handshakeTimeout: 10_000 });
    this.socket = socket;
    socket.on('open', () => {
      this.failures = 0;
      markOpen();
      if (this.everOpen) for (const set of this.listeners.values()) for (const listener of set) listener.reconnected();
      this.everOpen = true;
    });
    socket.on('message', (raw: Buffer | Buffer[], isBinary) => {
      if (isBinary) return;
      this.route(Buffer.isBuffer(raw) ? raw.toString('utf8') : Buffer.concat(raw).toString('utf8'));
    });
    // The close event follows; reconnecting is decided there.
    socket.on('error', () => undefined);
    socket.on('close', () => {
      if (this.socket !== socket) return;
      this.socket = undefined;
      if (this.closed) return;
      for (const set of this.listeners.values()) for (const listener of set) listener.dropped();
      const delay = Math.min(RECONNECT_BASE_MS * 2 ** this.failures, RECONNECT_MAX_MS);
      this.failures++;
      this.retryTimer = setTimeout(() => {
        this.retryTimer = undefined;
        if (!this.closed) this.connect();
      }, delay);
      this.retryTimer.unref();
    });
  }

  private route(text: string): void {
    let message: ComfyMessage;
    try {
      message = JSON.parse(text) as ComfyMessage;
    } catch {
      return;
    }
    const promptId = (message?.data as { prompt_id?: unknown } | undefined)?.prompt_id;
    if (typeof promptId !== 'string') return;
    for (const listener of this.listeners.get(promptId) ?? []) listener.message(message);
  }
}

/** One prompt's messages and socket events, kept until a listener takes them, then passed on as they come. */
export class PromptWatch implements PromptListener {
  private kept: ((listener: PromptListener) => void)[] | undefined = [];
  private listener: PromptListener | undefined;

  constructor(
    readonly promptId: string,
    /** Stops the socket routing the prompt's messages here; closing again does nothing. */
    readonly close: () => void,
  ) {}

  listen(listener: PromptListener): void {
    this.listener = listener;
    const kept = this.kept ?? [];
    this.kept = undefined;
    for (const event of kept) event(listener);
  }

  message(message: ComfyMessage): void {
    this.pass((listener) => listener.message(message));
  }

  reconnected(): void {
    this.pass((listener) => listener.reconnected());
  }

  dropped(): void {
    this.pass((listener) => listener.dropped());
  }

  private pass(event: (listener: PromptListener) => void): void {
    if (this.listener) event(this.listener);
    else this.kept?.push(event);
  }
}
