import type { Catalog, CatalogGenerationType, CatalogTool } from '../catalog/catalog.js';
import { DomainError, type FieldError } from '../common/problem.js';
import type { WebhookEventName } from '../jobs/history-item.entity.js';
import { type EngineRouting, MAX_OUTPUTS, routeOf, variantsOf } from '../config/engine-settings.js';

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
  /** The seed asked for (0..2^32-1); undefined: drawn, when the route takes one. */
  seed: number | undefined;
  /** How many results the job makes (1..4). */
  numOutputs: number;
}

/** The form's own fields, beside the tool's inputs: always text. */
const FORM_FIELDS = ['tool', 'generation_type', 'webhook_url', 'webhook_events', 'seed', 'num_outputs'];
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

/** The largest seed a job takes: models' seeds are 32-bit at the least. */
export const MAX_SEED = 2 ** 32 - 1;

/**
 * Refuses a form sent as anything but multipart with its boundary (a job may also come as JSON, read elsewhere). An
 * empty boundary (`boundary=`) would read as a form without parts, and be refused as one missing its tool.
 */
export function checkFormContentType(contentType: string | undefined): void {
  if (
    !/^\s*multipart\/form-data\s*;/i.test(contentType ?? '') ||
    !/;\s*boundary=("?)[^";\s]/i.test(contentType ?? '')
  ) {
    throw new DomainError(
      'malformed_multipart',
      'Send the body as multipart/form-data with its boundary (a job may also be sent as application/json).',
    );
  }
}

/**
 * The one decision of which fields a job form must and may have for its tool, in the catalog in use. Job creation runs
 * it on the parsed upload, and `npm run mock` (scripts/mock.mjs) on the form it is sent (with the built-in catalog),
 * so a frontend built on the mock is refused as the service refuses it. It reads names and texts only: what a file
 * holds is checked where it is stored.
 */
export function checkToolForm({ texts, files }: FormParts, catalog: Catalog): ToolForm {
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
  const tool = toolInUse(catalog, toolId);
  const accepted = new Set([...FORM_FIELDS, ...tool.inputs.map((input) => input.name)]);
  const checkAccepted = (why: string) => {
    for (const name of [...textFields.keys(), ...fileFields]) {
      if (!accepted.has(name)) throw unexpectedField(name, why);
    }
  };
  checkAccepted(`is not a field of the tool "${tool.id}"`);

  if (textFields.get('generation_type') === '') {
    throw new DomainError(
      'validation_failed',
      'The form field "generation_type" is empty; leave it out for the default.',
      {
        errors: [{ field: 'generation_type', message: 'must not be empty' }],
      },
    );
  }
  const type = generationTypeOf(tool, textFields.get('generation_type'));
  // A tool's types may take different inputs (a configured tool's): the form holds only the chosen one's.
  accepted.clear();
  for (const name of [...FORM_FIELDS, ...type.inputs.map((input) => input.name)]) accepted.add(name);
  checkAccepted(`is not a field of the generation type "${type.id}"`);

  const { images, texts: inputTexts } = checkTypeInputs(type, { texts: textFields, files: fileFields });
  const webhookUrl = textFields.get('webhook_url');
  return {
    tool,
    generationType: type.id,
    images,
    texts: inputTexts,
    webhookUrl,
    webhookEvents: checkWebhookEvents(webhookEvents, webhookUrl !== undefined),
    seed: integerField(textFields, 'seed', 0, MAX_SEED),
    numOutputs: integerField(textFields, 'num_outputs', 1, MAX_OUTPUTS) ?? 1,
  };
}

/**
 * The generation type's inputs, given as texts by name and the names of files: every required one there, each of its
 * kind, texts within their `max_length`; 400 `validation_failed` naming each field that is not. Fields the type does
 * not take are the caller's to refuse first.
 */
export function checkTypeInputs(
  type: CatalogGenerationType,
  given: { texts: ReadonlyMap<string, string>; files: ReadonlySet<string> },
): { images: string[]; texts: Record<string, string> } {
  const errors: FieldError[] = [];
  const images: string[] = [];
  const texts: Record<string, string> = {};
  for (const input of type.inputs) {
    const isFile = given.files.has(input.name);
    const text = given.texts.get(input.name);
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
        texts[input.name] = text;
      }
    } else if (input.required) {
      errors.push({ field: input.name, message: 'required text is missing' });
    }
  }
  if (errors.length > 0) {
    throw new DomainError('validation_failed', 'The form fields do not match the tool.', { errors });
  }
  return { images, texts };
}

/**
 * A tool the catalog in use offers, or 422 `unknown_tool` (a withdrawn one too). Job creation's check of the tool,
 * however its inputs come (a multipart form, a JSON body).
 */
export function toolInUse(catalog: Catalog, toolId: string): CatalogTool {
  const tool = catalog.findTool(toolId);
  if (!tool) {
    throw new DomainError('unknown_tool', `There is no tool "${truncate(toolId)}"; see GET /generation/tools.`);
  }
  return tool;
}

/** The tool's generation type of that id (its default when undefined), or 422 `invalid_generation_type`. */
export function generationTypeOf(tool: CatalogTool, generationType: string | undefined): CatalogGenerationType {
  const type =
    generationType === undefined
      ? tool.generationTypes[0]
      : tool.generationTypes.find((candidate) => candidate.id === generationType);
  if (!type) {
    throw new DomainError(
      'invalid_generation_type',
      `"${truncate(generationType ?? '')}" is not a generation type of "${tool.id}"; ` +
        `use one of: ${tool.generationTypes.map((candidate) => candidate.id).join(', ')}.`,
    );
  }
  return type;
}

/**
 * 422 `unsupported_option` for a seed or a number of results the job's route (in the routing in use now) cannot take:
 * checked at creation, so that a job is refused before its images are stored or fetched.
 */
export function checkVariants(form: ToolForm, routing: EngineRouting): void {
  const variants = variantsOf(routeOf(routing, form.tool.id, form.generationType));
  if (form.seed !== undefined && !variants.seed) {
    throw unsupportedOption('seed', `The model of "${form.tool.id}" takes no seed; leave "seed" out.`);
  }
  if (form.numOutputs > variants.maxOutputs) {
    throw unsupportedOption(
      'num_outputs',
      `The model of "${form.tool.id}" makes at most ${variants.maxOutputs} result${variants.maxOutputs > 1 ? 's' : ''} a job.`,
    );
  }
}

function unsupportedOption(field: string, message: string): DomainError {
  return new DomainError('unsupported_option', message, { errors: [{ field, message: 'not supported by the model' }] });
}

/** A form field holding a whole number from `least` to `most`, or 400 `validation_failed` naming it; undefined when absent. */
function integerField(
  fields: ReadonlyMap<string, string>,
  field: string,
  least: number,
  most: number,
): number | undefined {
  const text = fields.get(field);
  if (text === undefined) return undefined;
  const value = /^\d{1,10}$/.test(text) ? Number(text) : NaN;
  if (!(value >= least && value <= most)) {
    const message = `must be a whole number from ${least} to ${most}`;
    throw new DomainError('validation_failed', `The field "${field}" ${message}.`, { errors: [{ field, message }] });
  }
  return value;
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
