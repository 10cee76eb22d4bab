/**
 * Each kind's checks of its routes, which the routing file's reader (src/config/engines-file.ts) runs on every route
 * to a server of that kind. The third entry point of src/engines/, for config only: it and what it imports hold no
 * engine's run-time code, so the reader loads no client library.
 */
import type { EngineKinds } from '../config/engines-file.js';
import { COG_SETTINGS } from './cog/cog.settings.js';
import { COMFYUI_SETTINGS } from './comfyui/comfyui.settings.js';
import { REPLICATE_SETTINGS } from './replicate/replicate.settings.js';

export const ENGINE_KINDS: EngineKinds = {
  cog: COG_SETTINGS,
  comfyui: COMFYUI_SETTINGS,
  replicate: REPLICATE_SETTINGS,
};
