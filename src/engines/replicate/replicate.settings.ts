import type { EngineKind } from '../../config/engines-file.js';
import type { InputNames, ReplicateRoute, ReplicateServerSetting } from '../../config/engine-settings.js';
import { checkModelRoute, MODEL_INPUTS, MODEL_VARIANTS, modelVariants } from '../model-routes.js';

/** Replicate's HTTP API, unless `base_url` says otherwise (tests point it elsewhere). */
const BASE_URL = 'https://api.replicate.com/v1';

/**
 * Replicate's API (a token, its base URL), and a route to a model on it: an official model by name, a version by id,
 * or both; inputs as for Cog.
 */
export const REPLICATE_SETTINGS: EngineKind<ReplicateServerSetting, ReplicateRoute> = {
  server: {
    required: ['token'],
    properties: { token: { type: 'string', minLength: 1 }, base_url: { type: 'string' } },
    build: (raw, common, { at, url }) => ({
      ...common,
      kind: 'replicate',
      token: raw.token as string,
      baseUrl: url(`${at}.base_url`, (raw.base_url as string | undefined) ?? BASE_URL),
    }),
  },
  route: {
    required: ['inputs'],
    properties: {
      model: {
        type: 'string',
        pattern: '^[\\w.-]+/[\\w.-]+$',
        description:
          'owner/name of an official model, such as black-forest-labs/flux-kontext-pro, or of the version given',
      },
      version: { type: 'string', pattern: '^[0-9a-f]{64}$', description: 'a model version id: 64 hex digits' },
      inputs: MODEL_INPUTS,
      params: { type: 'object' },
      ...MODEL_VARIANTS,
    },
    build(raw, base, context) {
      checkModelRoute(raw, context);
      if (raw.model === undefined && raw.version === undefined) {
        context.problem(
          `${context.at}: set model (owner/name of an official model), version (64 hex digits), or both (that version of that model)`,
        );
        return undefined;
      }
      return {
        ...base,
        kind: 'replicate',
        model: raw.model as string | undefined,
        version: raw.version as string | undefined,
        inputs: raw.inputs as InputNames,
        params: (raw.params ?? {}) as Record<string, unknown>,
        ...modelVariants(raw, context),
      };
    },
  },
};
