import type { RouteCheckContext } from '../config/engines-file.js';
import { type InputNames, MAX_OUTPUTS, type ModelOutputs, type ModelVariants } from '../config/engine-settings.js';

/** `${VAR}`, which only an engine's settings read from the environment. */
const VARIABLE = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/** A route to a model that takes named inputs (Cog, Replicate): the tool's input name -> the model's. */
export const MODEL_INPUTS = { type: 'object', additionalProperties: { type: 'string', minLength: 1 } };

/** A Cog or Replicate route's `seed`, `num_outputs`, `max_outputs` and `repeat` (ENGINES.md "Seeds and variants per kind"). */
export const MODEL_VARIANTS = {
  seed: { type: 'string', minLength: 1, description: "the model's input that takes the seed" },
  num_outputs: { type: 'string', minLength: 1, description: "the model's input that takes how many results to make" },
  max_outputs: { type: 'integer', minimum: 1, description: 'the most results the model makes in one run' },
  repeat: { type: 'boolean', description: 'run the model once for each result, with seeds seed, seed+1, ...' },
};

/** The variants a Cog or Replicate route declares, each checked against the others. */
export function modelVariants(raw: Record<string, unknown>, { at, problem }: RouteCheckContext): ModelVariants {
  const numOutputs = raw.num_outputs as string | undefined;
  const max = raw.max_outputs as number | undefined;
  const repeat = raw.repeat === true;
  if (numOutputs !== undefined && repeat) {
    problem(`${at}.repeat: the model takes num_outputs already; set one of them`);
  }
  if (max !== undefined && numOutputs === undefined) {
    problem(`${at}.max_outputs: set num_outputs, the model's input it limits`);
  }
  const outputs: ModelOutputs | undefined =
    numOutputs !== undefined ? { input: numOutputs, max: max ?? MAX_OUTPUTS } : repeat ? 'repeat' : undefined;
  const seedInput = raw.seed as string | undefined;
  return { ...(seedInput !== undefined && { seedInput }), ...(outputs !== undefined && { outputs }) };
}

/** The checks of a route to a model that takes named inputs, beside its kind's own: what its names and params say. */
export function checkModelRoute(raw: Record<string, unknown>, context: RouteCheckContext): void {
  checkModelNames(raw.inputs as InputNames, raw.params as Record<string, unknown> | undefined, context);
  checkNoVariables(raw.params, `${context.at}.params`, context);
}

/**
 * Each of the model's inputs given once, by one tool input or one param: two values under one name would reach the
 * model as one, and the other input would be dropped without a word.
 */
function checkModelNames(
  inputs: InputNames,
  params: Record<string, unknown> | undefined,
  { at, problem }: RouteCheckContext,
): void {
  const given = new Map<string, string>();
  for (const [name, modelName] of Object.entries(inputs)) {
    const first = given.get(modelName);
    if (first) problem(`${at}.inputs.${name}: the model's input "${modelName}" is already given by ${first}`);
    else given.set(modelName, `${at}.inputs.${name}`);
  }
  for (const name of Object.keys(params ?? {})) {
    const first = given.get(name);
    if (first) problem(`${at}.params.${name}: the model's input "${name}" is already given by ${first}`);
  }
}

/**
 * No `${VAR}` in a route's params: only an engine's settings are read from the environment, so the model would be
 * sent the text `${VAR}` itself (a token given as a model input, say) without a word.
 */
function checkNoVariables(value: unknown, at: string, context: RouteCheckContext): void {
  if (typeof value === 'string') {
    for (const [, name] of value.matchAll(VARIABLE)) {
      context.problem(
        `${at}: \${${name}} is not read from the environment in a route, only in an engine's settings (engines.<name>)`,
      );
    }
  } else if (typeof value === 'object' && value !== null) {
    for (const [key, child] of Object.entries(value)) {
      checkNoVariables(child, Array.isArray(value) ? `${at}[${key}]` : `${at}.${key}`, context);
    }
  }
}
