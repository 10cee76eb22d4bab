import type { EngineKind } from '../../config/engines-file.js';
import type { CogServerSetting, CogRoute, InputNames } from '../../config/engine-settings.js';
import { checkModelRoute, MODEL_INPUTS, MODEL_VARIANTS, modelVariants } from '../model-routes.js';

/** A Cog server (its URL), and a route to its model: the tool's inputs by the model's input names, and fixed params. */
export const COG_SETTINGS: EngineKind<CogServerSetting, CogRoute> = {
  server: {
    required: ['url'],
    properties: { url: { type: 'string' } },
    build: (raw, common, { at, url }) => ({ ...common, kind: 'cog', url: url(`${at}.url`, raw.url as string) }),
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
