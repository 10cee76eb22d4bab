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

/** An item on success, a problem otherwise (`status` is then the item's, `code` and `errors` the problem's). */
export type ItemOrProblem = HistoryItemBody & Partial<Omit<ProblemBody, 'status'>>;

export const CREATE_PATH = '/generation/generate_image_v2/';

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
    headers: { ...(apiKey ? { Authorization: `Bearer ${apiKey}` } : {}), ...headers },
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
      headers: { Authorization: `Bearer ${apiKey}`, Prefer: `wait=${seconds}` },
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
    init: { body?: string; contentType?: string } = {},
  ): Promise<Answer<T>> {
    const response = await fetch(`${this.baseUrl}${path}`, {
      method,
      headers: {
        Authorization: `Bearer ${this.apiKey}`,
        ...(init.contentType ? { 'Content-Type': init.contentType } : {}),
      },
      body: init.body,
    });
    const contentType = (response.headers.get('content-type') ?? '').split(';')[0].trim();
    const text = await response.clone().text();
    const body = (await expectMatchesContract(response, method, pathTemplate)) as T;
    if (!response.bodyUsed) await response.arrayBuffer();
    return { status: response.status, contentType, text, body };
  }

  createJob(fields: Record<string, FormValue>, headers: Record<string, string> = {}): Promise<string> {
    return createJob(this.baseUrl, this.apiKey, fields, headers);
  }

  list(query = ''): Promise<Answer<HistoryPageBody & Partial<ProblemBody>>> {
    return this.call('GET', '/user/generation-history', `/user/generation-history${query ? `?${query}` : ''}`);
  }

  get(id: string): Promise<Answer<ItemOrProblem>> {
    return this.call('GET', '/user/generation-history/{id}', `/user/generation-history/${id}`);
  }

  feedback(id: string, body: string, contentType = 'application/json'): Promise<Answer<ItemOrProblem>> {
    return this.call('PATCH', '/user/generation-history/feedback/{id}', `/user/generation-history/feedback/${id}`, {
      body,
      contentType,
    });
  }

  delete(id: string): Promise<Answer<ProblemBody | undefined>> {
    return this.call('DELETE', '/user/generation-history/{id}', `/user/generation-history/${id}`);
  }
}
