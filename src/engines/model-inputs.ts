import type { InputNames, ModelVariants } from '../config/engine-settings.js';

/** Where a name a route sends comes from: a mapped input, a param, or the input its seed or count of results goes in. */
export type NameSection = 'inputs' | 'params' | 'seed' | 'num_outputs';

/**
 * How long a model's input schema is trusted once read: a model replaced behind the same address (another container
 * at a Cog URL, a new version of an official Replicate model) is checked as it is now within this long, and a route
 * fixed after a mismatch is used again.
 */
const SCHEMA_MAX_AGE_MS = 60_000;

/**
 * A model's input names, read on first use and again once SCHEMA_MAX_AGE_MS old; until a read succeeds each job reads
 * them (a failed read fails only its job).
 */
export class KeptInputNames<Names> {
  private kept: { names: Names; readAt: number } | undefined;

  constructor(private readonly read: (signal: AbortSignal | undefined) => Promise<Names>) {}

  async get(signal: AbortSignal | undefined): Promise<Names> {
    if (!this.kept || Date.now() - this.kept.readAt > SCHEMA_MAX_AGE_MS) {
      this.kept = { names: await this.read(signal), readAt: Date.now() };
    }
    return this.kept.names;
  }
}

/** The part of a Cog model's OpenAPI schema (Cog's `GET /openapi.json`, a Replicate version's `openapi_schema`) read. */
interface ModelSchema {
  components?: { schemas?: { Input?: { properties?: Record<string, unknown> } } };
}

/** The input names a model's OpenAPI schema declares (`components.schemas.Input`); undefined when it declares none. */
export function schemaInputNames(schema: unknown): ReadonlySet<string> | undefined {
  const properties = (schema as ModelSchema | null | undefined)?.components?.schemas?.Input?.properties;
  return typeof properties === 'object' && properties !== null ? new Set(Object.keys(properties)) : undefined;
}

/**
 * The names a route sends that its model does not have, each with the setting it comes from (`where`). A Cog model,
 * and Replicate, drop an input the model does not have without a word: a mapping mistake would run the model wrongly.
 */
export function namesNotInSchema(
  route: { inputs: InputNames; params: Readonly<Record<string, unknown>> } & ModelVariants,
  known: ReadonlySet<string>,
  where: (section: NameSection, name: string) => string,
): string[] {
  const missing: string[] = [];
  for (const [toolName, modelName] of Object.entries(route.inputs)) {
    if (!known.has(modelName)) missing.push(`"${modelName}" (${where('inputs', toolName)})`);
  }
  for (const name of Object.keys(route.params)) {
    if (!known.has(name)) missing.push(`"${name}" (${where('params', name)})`);
  }
  const { seedInput, outputs } = route;
  if (seedInput !== undefined && !known.has(seedInput)) missing.push(`"${seedInput}" (${where('seed', seedInput)})`);
  if (typeof outputs === 'object' && !known.has(outputs.input)) {
    missing.push(`"${outputs.input}" (${where('num_outputs', outputs.input)})`);
  }
  return missing;
}

/** The routing file's key path a name comes from: `routes.<key>.params.scale`, or `routes.<key>.seed`. */
export function settingOf(routeKey: string, section: NameSection, name: string): string {
  return section === 'inputs' || section === 'params'
    ? `routes.${routeKey}.${section}.${name}`
    : `routes.${routeKey}.${section}`;
}

/** What a model lacks, in words: `no input "scael" (routes.default.params.scael); its inputs: image, scale`. */
export function describeMissing(missing: readonly string[], known: ReadonlySet<string>): string {
  return `no input${missing.length > 1 ? 's' : ''} ${missing.join(', ')}; its inputs: ${[...known].join(', ')}`;
}
