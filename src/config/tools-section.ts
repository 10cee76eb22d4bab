import { Ajv, type ErrorObject } from 'ajv';
import {
  Catalog,
  CATALOG,
  CATALOG_ID,
  type CatalogGenerationType,
  type CatalogInput,
  type CatalogTool,
} from '../catalog/catalog.js';
import { describeError } from './schema-errors.js';

type Json = Record<string, unknown>;

/** A text input's longest value: what a multipart text field may hold (4000 bytes of UTF-8 in the upload's parser). */
export const TEXT_MAX_LENGTH = 1000;
const GROUPS = ['fashion', 'interior', 'textile', 'default'] as const;
const TEXT = { type: 'string', minLength: 1 };

const INPUT = {
  type: 'object',
  additionalProperties: false,
  required: ['kind', 'description'],
  properties: {
    kind: { enum: ['image', 'text'] },
    required: { type: 'boolean' },
    description: TEXT,
    max_length: {
      type: 'integer',
      minimum: 1,
      maximum: TEXT_MAX_LENGTH,
      description: `a whole number from 1 to ${TEXT_MAX_LENGTH}`,
    },
  },
};
const GENERATION_TYPE = {
  type: 'object',
  additionalProperties: false,
  required: ['title', 'description', 'inputs'],
  properties: {
    title: TEXT,
    description: TEXT,
    default: { type: 'boolean' },
    inputs: { type: 'object', minProperties: 1, additionalProperties: INPUT },
  },
};
const ajv = new Ajv({ allErrors: true, verbose: true, strict: false });
/** A built-in tool may be withdrawn or retitled; its generation types and inputs are the service's. */
const builtInTool = ajv.compile({
  type: 'object',
  additionalProperties: false,
  properties: { title: TEXT, disabled: { type: 'boolean' } },
});
const newTool = ajv.compile({
  type: 'object',
  additionalProperties: false,
  required: ['group_tool', 'title', 'generation_types'],
  properties: {
    group_tool: { enum: GROUPS },
    title: TEXT,
    disabled: { type: 'boolean' },
    generation_types: { type: 'object', minProperties: 1, additionalProperties: GENERATION_TYPE },
  },
});

/**
 * The catalog the routing file's `tools:` section makes of the built-in tools (docs/engines.md): new tools added,
 * built-in ones withdrawn (`disabled: true`) or retitled. Each problem names its key path.
 */
export function readToolsSection(section: Json | undefined): { catalog: Catalog; problems: string[] } {
  const problems: string[] = [];
  const builtIn = new Map(CATALOG.map((tool) => [tool.id, tool]));
  // Generation type ids are global, those of withdrawn tools too: an old item's type always names one type.
  const typeOwners = new Map(CATALOG.flatMap((tool) => tool.generationTypes.map((type) => [type.id, tool.id])));
  const changed = new Map<string, CatalogTool>();
  const added: CatalogTool[] = [];
  const withdrawn = new Set<string>();

  for (const [id, raw] of Object.entries(section ?? {})) {
    const at = `tools.${id}`;
    const known = builtIn.get(id);
    if (!CATALOG_ID.test(id)) {
      problems.push(`${at}: a tool id is 2 to 40 lowercase letters, digits and underscores, starting with a letter`);
      continue;
    }
    const validate = known ? builtInTool : newTool;
    if (!validate(raw)) {
      for (const error of validate.errors ?? []) problems.push(explained(error, at, known));
      continue;
    }
    const tool = raw as Json;
    if (tool.disabled === true) withdrawn.add(id);
    if (known) {
      if (tool.title !== undefined) changed.set(id, { ...known, title: tool.title as string });
      continue;
    }
    const types = generationTypes(id, tool.generation_types as Record<string, Json>, typeOwners, problems);
    if (!types) continue;
    const inputs = new Map<string, CatalogInput>();
    for (const type of types) for (const input of type.inputs) inputs.set(input.name, inputs.get(input.name) ?? input);
    added.push({
      id,
      group: tool.group_tool as CatalogTool['group'],
      title: tool.title as string,
      inputs: [...inputs.values()],
      generationTypes: types,
      configured: true,
    });
  }
  const all = [...CATALOG.map((tool) => changed.get(tool.id) ?? tool), ...added];
  const catalog = new Catalog(
    all.filter((tool) => !withdrawn.has(tool.id)),
    all.filter((tool) => withdrawn.has(tool.id)),
  );
  return { catalog, problems };
}

/**
 * A schema's message with what usually causes it: a built-in tool's keys the file may not change, said as such rather
 * than as unknown keys; a key with a space, which is most often the end of a description that has a comma in a flow
 * mapping (`{ description: A photo, any background }` is a description and a key `any background`).
 */
function explained(error: ErrorObject, at: string, known: CatalogTool | undefined): string {
  const message = describeError(error, at);
  if (error.keyword !== 'additionalProperties') return message;
  if (known) {
    return `${message.replace(/ \(allowed: .*\)$/, '')}: "${known.id}" is a built-in tool, whose generation types and inputs are the service's; only its title and disabled may be set`;
  }
  return /\s/.test(String((error.params as { additionalProperty: unknown }).additionalProperty))
    ? `${message}; in { }, a comma ends a value: quote a text that has one`
    : message;
}

/** A new tool's generation types, the default first; undefined when one of them cannot be used. */
function generationTypes(
  toolId: string,
  raw: Record<string, Json>,
  typeOwners: Map<string, string>,
  problems: string[],
): CatalogGenerationType[] | undefined {
  const before = problems.length;
  const types: CatalogGenerationType[] = [];
  const defaults = Object.entries(raw)
    .filter(([, type]) => type.default === true)
    .map(([id]) => id);
  if (defaults.length > 1) {
    problems.push(`tools.${toolId}.generation_types: one type is the default, not ${defaults.join(' and ')}`);
  }
  for (const [id, type] of Object.entries(raw)) {
    const at = `tools.${toolId}.generation_types.${id}`;
    if (!CATALOG_ID.test(id)) {
      problems.push(
        `${at}: a generation type id is 2 to 40 lowercase letters, digits and underscores, starting with a letter`,
      );
      continue;
    }
    const owner = typeOwners.get(id);
    if (owner !== undefined) {
      problems.push(`${at}: generation type ids are unique across all tools, and "${id}" is one of "${owner}"`);
      continue;
    }
    typeOwners.set(id, toolId);
    const inputs: CatalogInput[] = [];
    for (const [name, input] of Object.entries(type.inputs as Record<string, Json>)) {
      const where = `${at}.inputs.${name}`;
      if (!CATALOG_ID.test(name) || ['tool', 'generation_type', 'webhook_url'].includes(name)) {
        problems.push(
          `${where}: an input name is 2 to 40 lowercase letters, digits and underscores, starting with a letter, and not tool, generation_type or webhook_url`,
        );
        continue;
      }
      if (input.kind === 'image' && input.max_length !== undefined) {
        problems.push(`${where}.max_length: only a text input has a max_length`);
        continue;
      }
      const description = input.description as string;
      inputs.push({
        name,
        kind: input.kind as CatalogInput['kind'],
        required: input.required === true,
        description,
        neutralDescription: description,
        ...(input.kind === 'text' ? { maxLength: (input.max_length as number | undefined) ?? TEXT_MAX_LENGTH } : {}),
      });
    }
    const entry = { id, title: type.title as string, description: type.description as string, inputs };
    if (type.default === true) types.unshift(entry);
    else types.push(entry);
  }
  return problems.length === before ? types : undefined;
}
