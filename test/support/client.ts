import type { components } from '../../src/generated/openapi.js';
import { expectMatchesContract } from './contract.js';

/**
 * The one test client: requests as a client sends them, answers typed from the contract's generated types (the
 * types the service's own DTOs implement).
 */
export type HistoryItemBody = components['schemas']['HistoryItem'];
export type HistoryPageBody = components['schemas']['HistoryPage'];
export type ProblemBody = components['schemas']['Problem'];
export type JobAcceptedBody = components['schemas']['JobAccepted'];
export type ToolsBody = components['schemas']['Tool'][];
export type GenerationTypesBody = components['schemas']['GenerationType'][];
export type WebhookSecretBody = components['schemas']['WebhookSecret'];
export type JobRequestBody = components['schemas']['JobRequest'];
export type StoredFileBody = components['schemas']['StoredFile'];
export type UsageBody = components['schemas']['Usage'];
export type WebhookEventBody = components['schemas']['WebhookEvent'];

/** An item on success, a problem otherwise (`status` is then the item's, `code` and `errors` the problem's). */
export type ItemOrProblem = HistoryItemBody & Partial<Omit<ProblemBody, 'status'>>;

export const CREATE_PATH = '/generation/generate_image_v2/';

/**
 * The credentials header every client request carries. Tests about the raw HTTP (malformed bodies, headers, failed
 * authentications) put it on requests they build themselves; everything else goes through {@link Client}.
 */
export function bearer(apiKey: string): Record<string, string> {
  return { Authorization: `Bearer ${apiKey}` };
}

/** A form field: text, or a file part as a browser sends it. */
export type FormValue = string | { data: Buffer; filename?: string; contentType?: string };

/**
 * POSTs a job as a browser would, with multipart/form-data built by fetch itself. `fields` by name, or as parts in
 * order, so that a field may come twice.
 */
export function postJob(
  baseUrl: string,
  apiKey: string | undefined,
  fields: Record<string, FormValue> | [string, FormValue][],
  headers: Record<string, string> = {},
  path = CREATE_PATH,
): Promise<Response> {
  const form = new FormData();
  for (const [name, value] of Array.isArray(fields) ? fields : Object.entries(fields)) {
    if (typeof value === 'string') form.append(name, value);
    else {
      const blob = new Blob([new Uint8Array(value.data)], { type: value.contentType ?? 'application/octet-stream' });
      form.append(name, blob, value.filename ?? `${name}.bin`);
    }
  }
  return fetch(`${baseUrl}${path}`, {
    method: 'POST',
    body: form,
    headers: { ...(apiKey ? bearer(apiKey) : {}), ...headers },
  });
}

/** POSTs a job that must be accepted (202) and returns its id. */
export async function createJob(
  baseUrl: string,
  apiKey: string,
  fields: Record<string, FormValue>,
  headers: Record<string, string> = {},
): Promise<string> {
  const response = await postJob(baseUrl, apiKey, fields, headers);
  const text = await response.text();
  if (response.status !== 202) throw new Error(`POST job answered ${response.status}: ${text}`);
  return (JSON.parse(text) as JobAcceptedBody).history_item_id;
}

/** Waits until the item is final (or the deadline passes), as a client would: one request held with `Prefer: wait`. */
export async function waitForFinal(
  baseUrl: string,
  apiKey: string,
  id: string,
  timeoutMs = 30_000,
): Promise<HistoryItemBody> {
  const deadline = Date.now() + timeoutMs;
  let last: HistoryItemBody | undefined;
  while (Date.now() < deadline) {
    const seconds = Math.max(1, Math.min(60, Math.floor((deadline - Date.now()) / 1000)));
    const response = await fetch(`${baseUrl}/user/generation-history/${id}`, {
      headers: { ...bearer(apiKey), Prefer: `wait=${seconds}` },
    });
    if (response.status === 200) {
      last = (await response.json()) as HistoryItemBody;
      if (last.status !== 'pending') return last;
    } else {
      await response.body?.cancel();
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  throw new Error(`item ${id} still not final after ${timeoutMs} ms: ${JSON.stringify(last)}`);
}

/** The answer to one request, its body checked against what the contract documents for the operation. */
export interface Answer<T> {
  status: number;
  contentType: string;
  headers: Headers;
  /** The body exactly as sent. */
  text: string;
  body: T;
}

/** Calls the service as a client would and checks every answer against the contract. */
export class Client {
  constructor(
    private readonly baseUrl: string,
    private readonly apiKey: string,
  ) {}

  async call<T>(
    method: string,
    pathTemplate: string,
    path: string,
    init: { body?: string; contentType?: string; headers?: Record<string, string> } = {},
  ): Promise<Answer<T>> {
    const response = await fetch(`${this.baseUrl}${path}`, {
      method,
      headers: {
        ...bearer(this.apiKey),
        ...(init.contentType ? { 'Content-Type': init.contentType } : {}),
        ...init.headers,
      },
      body: init.body,
    });
    const contentType = (response.headers.get('content-type') ?? '').split(';')[0].trim();
    const text = await response.clone().text();
    const body = (await expectMatchesContract(response, method, pathTemplate)) as T;
    if (!response.bodyUsed) await response.arrayBuffer();
    return { status: response.status, contentType, headers: response.headers, text, body };
  }

  tools(): Promise<Answer<ToolsBody>> {
    return this.call('GET', '/generation/tools', '/generation/tools');
  }

  generationTypes(tool: string): Promise<Answer<GenerationTypesBody>> {
    return this.call('GET', '/generation/generationTypes', `/generation/generationTypes?tool=${tool}`);
  }

  /** POSTs a job and returns the service's answer as it is, for tests of what creation answers. */
  postJob(fields: Record<string, FormValue> | [string, FormValue][], headers: Record<string, string> = {}) {
    return postJob(this.baseUrl, this.apiKey, fields, headers);
  }

  createJob(fields: Record<string, FormValue>, headers: Record<string, string> = {}): Promise<string> {
    return createJob(this.baseUrl, this.apiKey, fields, headers);
  }

  waitForFinal(id: string, timeoutMs?: number): Promise<HistoryItemBody> {
    return waitForFinal(this.baseUrl, this.apiKey, id, timeoutMs);
  }

  /** POSTs a job as JSON (`inputs` by URL, stored file or text); the answer checked against the contract. */
  createJson(
    job: JobRequestBody | Record<string, unknown>,
    headers: Record<string, string> = {},
  ): Promise<Answer<JobAcceptedBody & Partial<Omit<ProblemBody, 'status'>>>> {
    return this.call('POST', CREATE_PATH, CREATE_PATH, {
      body: JSON.stringify(job),
      contentType: 'application/json',
      headers,
    });
  }

  /** Stores an image with `POST /files` (multipart, built by fetch), the answer checked against the contract. */
  async uploadFile(
    data: Buffer,
    contentType = 'application/octet-stream',
  ): Promise<Answer<StoredFileBody & Partial<ProblemBody>>> {
    const form = new FormData();
    form.append('file', new Blob([new Uint8Array(data)], { type: contentType }), 'file.bin');
    const response = await fetch(`${this.baseUrl}/files`, { method: 'POST', body: form, headers: bearer(this.apiKey) });
    const contentTypeOf = (response.headers.get('content-type') ?? '').split(';')[0].trim();
    const text = await response.clone().text();
    const body = (await expectMatchesContract(response, 'POST', '/files')) as StoredFileBody & Partial<ProblemBody>;
    return { status: response.status, contentType: contentTypeOf, headers: response.headers, text, body };
  }

  getFile(id: string): Promise<Answer<StoredFileBody & Partial<ProblemBody>>> {
    return this.call('GET', '/files/{id}', `/files/${id}`);
  }

  deleteFile(id: string): Promise<Answer<ProblemBody | undefined>> {
    return this.call('DELETE', '/files/{id}', `/files/${id}`);
  }

  list(query = ''): Promise<Answer<HistoryPageBody & Partial<ProblemBody>>> {
    return this.call('GET', '/user/generation-history', `/user/generation-history${query ? `?${query}` : ''}`);
  }

  /** The item; with `waitSeconds`, held until it changes or the time is up (`Prefer: wait`). */
  get(id: string, waitSeconds?: number): Promise<Answer<ItemOrProblem>> {
    return this.call('GET', '/user/generation-history/{id}', `/user/generation-history/${id}`, {
      headers: waitSeconds === undefined ? {} : { Prefer: `wait=${waitSeconds}` },
    });
  }

  /** The first answer of the item's event stream (which is then closed): its first event's data, or a problem. */
  events(id: string): Promise<Answer<Partial<ItemOrProblem> | undefined>> {
    return this.call('GET', '/user/generation-history/{id}/events', `/user/generation-history/${id}/events`);
  }

  cancel(id: string): Promise<Answer<ItemOrProblem>> {
    return this.call('POST', '/user/generation-history/{id}/cancel', `/user/generation-history/${id}/cancel`);
  }

  feedback(id: string, body: string, contentType = 'application/json'): Promise<Answer<ItemOrProblem>> {
    return this.call('PATCH', '/user/generation-history/feedback/{id}', `/user/generation-history/feedback/${id}`, {
      body,
      contentType,
    });
  }

  /** The caller's limits, what they use of them now, and their jobs this month. */
  usage(): Promise<Answer<UsageBody>> {
    return this.call('GET', '/user/usage', '/user/usage');
  }

  webhookSecret(): Promise<Answer<WebhookSecretBody>> {
    return this.call('GET', '/user/webhook-secret', '/user/webhook-secret');
  }

  rotateWebhookSecret(): Promise<Answer<WebhookSecretBody>> {
    return this.call('POST', '/user/webhook-secret/rotate', '/user/webhook-secret/rotate');
  }

  delete(id: string): Promise<Answer<ProblemBody | undefined>> {
    return this.call('DELETE', '/user/generation-history/{id}', `/user/generation-history/${id}`);
  }
}
