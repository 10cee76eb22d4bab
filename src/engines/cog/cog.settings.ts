import { POOL_PROPERTIES, poolSetting } from '../pool/pool.settings.js';
import type { EngineKind } from '../../config/engines-file.js';
import type { CogServerSetting, CogRoute, InputNames } from '../../config/engine-settings.js';
import { checkModelRoute, MODEL_INPUTS, MODEL_VARIANTS, modelVariants } from '../model-routes.js';

/** A Cog server (its URL, or a pool of them), and a route to its model: the tool's inputs by the model's input names, and fixed params. */
export const COG_SETTINGS: EngineKind<CogServerSetting, CogRoute> = {
  server: {
    required: [],
    properties: POOL_PROPERTIES,
    build: (raw, common, context) => ({ ...common, kind: 'cog', ...poolSetting(raw, context) }),
  },
  route: {
    required: ['inputs'],
    properties: { inputs: MODEL_INPUTS, params: { type: 'object' }, ...MODEL_VARIANTS },
    build(raw, base, context) {
      checkModelRoute(raw, context);
      return {
        ...base,
        kind: 'cog',
        inputs: raw.inputs as InputNames,
        params: (raw.params ?? {}) as Record<string, unknown>,
        passGenerationType: false,
        ...modelVariants(raw, context),
      };
    },
  },
};
