import { type CatalogTool, findTool } from '../catalog/catalog.js';
import { DomainError, type FieldError } from '../common/problem.js';
import type { WebhookEventName } from '../jobs/history-item.entity.js';

/** A job form as it came: its text parts by name and value, and the names of its file parts, in the order sent. */
export interface FormParts {
  texts: ReadonlyArray<readonly [name: string, value: string]>;
  files: readonly string[];
}

/** A form whose fields are exactly its tool's: the images themselves and the webhook URL are still to be checked. */
export interface ToolForm {
  tool: CatalogTool;
  generationType: string;
  /** The names of the tool's image inputs, each sent as one file. */
  images: string[];
  texts: Record<string, string>;
  webhookUrl: string | undefined;
  /** The webhook messages asked for; null: the final state alone (the default). */
  webhookEvents: WebhookEventName[] | null;
}

/** The form's own fields, beside the tool's inputs: always text. */
const FORM_FIELDS = ['tool', 'generation_type', 'webhook_url', 'webhook_events'];
/** The one form field that may come more than once: one part per event. */
const REPEATED_FIELD = 'webhook_events';

const WEBHOOK_EVENTS: readonly WebhookEventName[] = ['started', 'progress', 'completed'];

/**
 * Checks `webhook_events` as sent (the values of a repeated form field, or a JSON body's array): each a known event,
 * and a `webhook_url` to send them to. Resolves the events in a fixed order, each once, or null for the default, the
 * final state alone: it always comes, asked for or not.
 */
export function checkWebhookEvents(
  values: readonly unknown[] | undefined,
  hasWebhookUrl: boolean,
): WebhookEventName[] | null {
  if (values === undefined) return null;
  const problem = (message: string) =>
    new DomainError('invalid_webhook_events', `The field "webhook_events" ${message}.`, {
      errors: [{ field: 'webhook_events', message }],
    });
  const unknown = values.find((value) => !WEBHOOK_EVENTS.includes(value as WebhookEventName));
  if (unknown !== undefined) {
    const name = typeof unknown === 'string' ? unknown : JSON.stringify(unknown);
    throw problem(`names an unknown event ${truncate(name)}; use ${WEBHOOK_EVENTS.join(', ')}`);
  }
  if (!hasWebhookUrl) throw problem('needs a webhook_url to send the events to');
  const asked = WEBHOOK_EVENTS.filter((event) => event === 'completed' || values.includes(event));
  return asked.length === 1 ? null : asked;
}

/**
 * Refuses a job sent as anything but a multipart form with its boundary. An empty boundary (`boundary=`) would read as
 * a form without parts, and be refused as one missing its tool.
 */
export function checkFormContentType(contentType: string | undefined): void {
  if (
    !/^\s*multipart\/form-data\s*;/i.test(contentType ?? '') ||
    !/;\s*boundary=("?)[^";\s]/i.test(contentType ?? '')
  ) {
    throw new DomainError('malformed_multipart', 'Send the job as multipart/form-data, with its boundary.');
  }
}

/**
 * The one decision of which fields a job form must and may have for its tool. Job creation runs it on the parsed
 * upload, and `npm run mock` (scripts/mock.mjs) on the form it is sent, so a frontend built on the mock is refused
 * as the service refuses it. It reads names and texts only: what a file holds is checked where it is stored.
 */
export function checkToolForm({ texts, files }: FormParts): ToolForm {
  const textFields = new Map<string, string>();
  const fileFields = new Set<string>();
  let webhookEvents: string[] | undefined;
  const sentTwice = (name: string) => textFields.has(name) || fileFields.has(name);
  for (const [name, value] of texts) {
    if (name === REPEATED_FIELD) {
      (webhookEvents ??= []).push(value);
      continue;
    }
    if (sentTwice(name)) throw unexpectedField(name, 'sent more than once');
    textFields.set(name, value);
  }
  for (const name of files) {
    if (sentTwice(name)) throw unexpectedField(name, 'sent more than once');
    fileFields.add(name);
  }
  // A file sent for one of these would be dropped, never stored nor removed with the job.
  const fileForText = FORM_FIELDS.find((field) => fileFields.has(field));
  if (fileForText) {
    throw new DomainError('validation_failed', `The form field "${fileForText}" must be text, not a file.`, {
      errors: [{ field: fileForText, message: 'must be text, not a file' }],
    });
  }

  const toolId = textFields.get('tool');
  if (toolId === undefined || toolId === '') {
    throw new DomainError('validation_failed', 'The form field "tool" is required.', {
      errors: [{ field: 'tool', message: 'required: a tool from GET /generation/tools' }],
    });
  }
  const tool = findTool(toolId);
  if (!tool)
    throw new DomainError('unknown_tool', `There is no tool "${truncate(toolId)}"; see GET /generation/tools.`);

  const accepted = new Set([...FORM_FIELDS, ...tool.inputs.map((input) => input.name)]);
  for (const name of [...textFields.keys(), ...fileFields]) {
    if (!accepted.has(name)) throw unexpectedField(name, `is not a field of the tool "${tool.id}"`);
  }

  if (textFields.get('generation_type') === '') {
    throw new DomainError(
      'validation_failed',
      'The form field "generation_type" is empty; leave it out for the default.',
      {
        errors: [{ field: 'generation_type', message: 'must not be empty' }],
      },
    );
  }
  const generationType = textFields.get('generation_type') ?? tool.generationTypes[0].id;
  if (!tool.generationTypes.some((type) => type.id === generationType)) {
    throw new DomainError(
      'invalid_generation_type',
      `"${truncate(generationType)}" is not a generation type of "${tool.id}"; ` +
        `use one of: ${tool.generationTypes.map((type) => type.id).join(', ')}.`,
    );
  }

  const errors: FieldError[] = [];
  const images: string[] = [];
  const inputTexts: Record<string, string> = {};
  for (const input of tool.inputs) {
    const isFile = fileFields.has(input.name);
    const text = textFields.get(input.name);
    if (input.kind === 'image') {
      if (isFile) images.push(input.name);
      else if (text !== undefined) errors.push({ field: input.name, message: 'must be an image file, not text' });
      else if (input.required) errors.push({ field: input.name, message: 'required image is missing' });
    } else if (isFile) {
      errors.push({ field: input.name, message: 'must be text, not a file' });
    } else if (text !== undefined) {
      if (input.maxLength !== undefined && [...text].length > input.maxLength) {
        errors.push({ field: input.name, message: `at most ${input.maxLength} characters` });
      } else {
        inputTexts[input.name] = text;
      }
    } else if (input.required) {
      errors.push({ field: input.name, message: 'required text is missing' });
    }
  }
  if (errors.length > 0) {
    throw new DomainError('validation_failed', 'The form fields do not match the tool.', { errors });
  }
  const webhookUrl = textFields.get('webhook_url');
  return {
    tool,
    generationType,
    images,
    texts: inputTexts,
    webhookUrl,
    webhookEvents: checkWebhookEvents(webhookEvents, webhookUrl !== undefined),
  };
}

export function unexpectedField(field: string, why: string): DomainError {
  const name = truncate(field);
  return new DomainError('unexpected_field', `The field "${name}" ${why}.`, {
    errors: [{ field: name, message: why }],
  });
}

function truncate(value: string): string {
  return value.length > 64 ? `${value.slice(0, 64)}…` : value;
}
