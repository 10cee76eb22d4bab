import type { RouteKind } from '../../config/engines-file.js';
import type { CogRoute, InputNames } from '../../config/engine-settings.js';
import { checkModelRoute, MODEL_INPUTS } from '../model-routes.js';

/** A route to a Cog model: the tool's inputs by the model's input names, and fixed params beside them. */
export const COG_ROUTES: RouteKind<CogRoute> = {
  required: ['inputs'],
  properties: { inputs: MODEL_INPUTS, params: { type: 'object' } },
  build(raw, base, context) {
    checkModelRoute(raw, context);
    return {
      ...base,
      kind: 'cog',
      inputs: raw.inputs as InputNames,
      params: (raw.params ?? {}) as Record<string, unknown>,
      passGenerationType: false,
    };
  },
};
