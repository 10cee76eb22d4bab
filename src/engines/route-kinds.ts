/**
 * Each kind's checks of its routes, which the routing file's reader (src/config/engines-file.ts) runs on every route
 * to a server of that kind. The third entry point of src/engines/, for config only: it and what it imports hold no
 * engine's run-time code, so the reader loads no client library.
 */
import type { RouteKinds } from '../config/engines-file.js';
import { COG_ROUTES } from './cog/cog.route.js';
import { COMFYUI_ROUTES } from './comfyui/comfyui.route.js';
import { REPLICATE_ROUTES } from './replicate/replicate.route.js';

export const ROUTE_KINDS: RouteKinds = { cog: COG_ROUTES, comfyui: COMFYUI_ROUTES, replicate: REPLICATE_ROUTES };
