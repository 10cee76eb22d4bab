import type { RouteKind } from '../../config/engines-file.js';
import type { InputNames, ReplicateRoute } from '../../config/engine-settings.js';
import { checkModelRoute, MODEL_INPUTS } from '../model-routes.js';

/** A route to a model on Replicate: an official model by name, a version by id, or both; inputs as for Cog. */
export const REPLICATE_ROUTES: RouteKind<ReplicateRoute> = {
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
    };
  },
};
