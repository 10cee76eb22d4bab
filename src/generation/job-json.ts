import type { Catalog } from '../catalog/catalog.js';
import { DomainError } from '../common/problem.js';
import { type FormParts, unexpectedField } from './job-form.js';

/**
 * The fields of a JSON job beside `inputs`, each read into the form field of the same name, so that `checkToolForm`
 * judges a JSON job exactly as a form: a new field of job creation is added here (and to the form's fields) once.
 * A reader answers the field's values as form texts, or undefined when the JSON value is of the wrong type.
 */
const JSON_FIELDS: Record<string, { read: (value: unknown) => string[] | undefined; expected: string }> = {
  tool: { read: oneString, expected: 'must be a string' },
  generation_type: { read: oneString, expected: 'must be a string' },
  webhook_url: { read: oneString, expected: 'must be a string' },
  // The form's repeated field, one part per event.
  webhook_events: { read: stringArray, expected: 'must be an array of strings' },
  seed: { read: oneInteger, expected: 'must be a whole number' },
  num_outputs: { read: oneInteger, expected: 'must be a whole number' },
};

/** What a JSON job names for each image input: a URL to fetch or a stored file of the user's. */
export type ImageSource = { kind: 'url'; url: string } | { kind: 'file'; fileId: string };

/** A stored file's id as `POST /files` makes them; anything of this shape that is not one is a missing file. */
const FILE_ID = /^file_[A-Za-z0-9]{1,64}$/;

/**
 * A JSON job's body as the form parts it stands for: its fields as text parts, its text inputs as text parts, its
 * image inputs as file parts (whose values, a URL or a file id, are returned beside them).
 */
export function jsonJobParts(body: unknown, catalog: Catalog): { parts: FormParts; imageValues: Map<string, string> } {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new DomainError('bad_request', 'The request body must be a JSON object.');
  }
  const texts: [string, string][] = [];
  let inputs: unknown;
  for (const [name, value] of Object.entries(body)) {
    if (name === 'inputs') {
      inputs = value;
      continue;
    }
    const field = JSON_FIELDS[name];
    if (!field) throw unexpectedField(name, 'is not a field of a JSON job');
    const values = field.read(value);
    if (!values) throw invalidType(name, field.expected);
    for (const text of values) texts.push([name, text]);
  }
  if (inputs === undefined) throw invalidType('inputs', "required: the tool's inputs by name");
  if (typeof inputs !== 'object' || inputs === null || Array.isArray(inputs)) {
    throw invalidType('inputs', "must be an object of the tool's inputs by name");
  }
  const toolId = body && (body as Record<string, unknown>).tool;
  const tool = typeof toolId === 'string' ? catalog.findTool(toolId) : undefined;
  const files: string[] = [];
  const imageValues = new Map<string, string>();
  for (const [name, value] of Object.entries(inputs as Record<string, unknown>)) {
    // Named beside the inputs, not among them: one of these here would be read as the field itself.
    if (name in JSON_FIELDS || name === 'inputs')
      throw unexpectedField(name, 'is not an input; give it beside `inputs`');
    if (typeof value !== 'string') throw invalidType(name, 'must be a string');
    const input = tool?.inputs.find((candidate) => candidate.name === name);
    if (input?.kind === 'image') {
      files.push(name);
      imageValues.set(name, value);
    } else {
      texts.push([name, value]);
    }
  }
  return { parts: { texts, files }, imageValues };
}

/** Where an image input's value says its bytes are: an http(s) URL or a stored file's id. */
export function imageSourceOf(field: string, value: string): ImageSource {
  if (FILE_ID.test(value)) return { kind: 'file', fileId: value };
  if (/^https?:\/\//i.test(value)) return { kind: 'url', url: value };
  throw invalidType(field, 'must be an https URL or the file_id of a stored file (POST /files)');
}

function oneString(value: unknown): string[] | undefined {
  return typeof value === 'string' ? [value] : undefined;
}

function stringArray(value: unknown): string[] | undefined {
  return Array.isArray(value) && value.every((item) => typeof item === 'string') ? value : undefined;
}

/** A JSON integer as the form's text; its range is the form's to check. */
function oneInteger(value: unknown): string[] | undefined {
  return Number.isSafeInteger(value) ? [String(value)] : undefined;
}

function invalidType(field: string, message: string): DomainError {
  return new DomainError('validation_failed', `The field "${field}" ${message}.`, { errors: [{ field, message }] });
}
