import { Ajv2019 } from 'ajv/dist/2019.js';
import addFormats from 'ajv-formats';
import contractSchema from './contract-schema.cjs';

const contract = contractSchema.loadContract();
/** What an event stream's events carry: `item` events a history item, `deleted` events the id of one. */
const EVENT_SCHEMAS: Record<string, unknown> = {
  item: contractSchema.toJsonSchema(contract, { $ref: '#/components/schemas/HistoryItem' }),
  deleted: {
    type: 'object',
    additionalProperties: false,
    required: ['history_item_id'],
    properties: { history_item_id: { type: 'string', format: 'uuid' } },
  },
};
const ajv = new Ajv2019({ allErrors: true, strict: false });
(addFormats as unknown as (ajv: Ajv2019) => void)(ajv);

/**
 * Asserts that a response is one the contract documents for this operation: its status is listed, its
 * Content-Type is the documented one and a JSON body validates against the documented schema, which it returns.
 */
export async function expectMatchesContract(
  response: Response,
  method: string,
  pathTemplate: string,
): Promise<unknown> {
  const documented = contractSchema.documentedResponse(contract, method, pathTemplate, response.status);
  if (!documented) throw new Error(`${method} ${pathTemplate}: status ${response.status} is not in the contract`);
  const content = documented.content as Record<string, unknown> | undefined;
  const contentType = (response.headers.get('content-type') ?? '').split(';')[0].trim();
  if (!content) {
    if (response.status !== 204 && contentType) {
      throw new Error(`${method} ${pathTemplate} ${response.status}: no body documented, got ${contentType}`);
    }
    return undefined;
  }
  if (!(contentType in content)) {
    throw new Error(
      `${method} ${pathTemplate} ${response.status}: Content-Type ${contentType} is not one of ${Object.keys(content).join(', ')}`,
    );
  }
  if (contentType === 'text/event-stream') return firstEventMatches(response, `${method} ${pathTemplate}`);
  // Binary and text bodies (media, the YAML contract) are left unread for the caller.
  if (!contentType.endsWith('json')) return undefined;
  const text = await response.text();
  const body: unknown = JSON.parse(text);
  const schema = contractSchema.responseSchema(contract, method, pathTemplate, response.status, contentType);
  if (schema && !ajv.validate(schema, body)) {
    throw new Error(
      `${method} ${pathTemplate} ${response.status}: body breaks the contract: ${ajv.errorsText(ajv.errors)}\n${text}`,
    );
  }
  return body;
}

/** Asserts that a value (a stream event's data, a webhook's body) validates against a schema of the contract. */
export function expectMatchesSchema(name: string, value: unknown): void {
  const schema = contractSchema.toJsonSchema(contract, { $ref: `#/components/schemas/${name}` });
  if (!ajv.validate(schema, value)) {
    throw new Error(`${name} breaks the contract: ${ajv.errorsText(ajv.errors)}\n${JSON.stringify(value)}`);
  }
}

/**
 * Reads an event stream's first block (an open-ended stream never ends by itself): an event the contract describes,
 * whose data it returns, or a comment, with which a stream that has no event yet says it is open. Closes the stream.
 */
async function firstEventMatches(response: Response, operation: string): Promise<unknown> {
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let text = '';
  try {
    while (!text.includes('\n\n')) {
      const { done, value } = await reader.read();
      if (done) break;
      text += value;
    }
  } finally {
    await reader.cancel();
  }
  const block = text.slice(0, text.indexOf('\n\n'));
  if (block.startsWith(':')) return undefined;
  const event = /^event: (.+)$/m.exec(block)?.[1];
  const data = /^data: (.+)$/m.exec(block)?.[1];
  const schema = event === undefined ? undefined : EVENT_SCHEMAS[event];
  if (!schema || data === undefined)
    throw new Error(`${operation}: the first event is not one the contract names:\n${text}`);
  const body: unknown = JSON.parse(data);
  if (!ajv.validate(schema, body)) {
    throw new Error(`${operation}: ${event} event breaks the contract: ${ajv.errorsText(ajv.errors)}\n${data}`);
  }
  return body;
}
