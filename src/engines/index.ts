/**
 * The engines' entry point for everything outside `src/engines/`: the worker, scripts and benches import from here
 * and never from an engine's own files (`npm run lint:deps` holds them to it). The local engine in the calling thread
 * is the other entry point's, `in-process.ts`, which the service never imports.
 */
export * from './engine.js';
export { EngineRegistry, type ResolvedRoute, type ServerState } from './engine-registry.js';
export { ServerPool, type PoolServer, type PoolView, type Resolve } from './pool/server-pool.js';
export { EnginesModule } from './engines.module.js';
export { REQUEST_ATTEMPTS } from './remote-http.js';
/** Each kind's server, as the registry builds it from the routing file (and the kinds' integration tests do). */
export { CogServer } from './cog/cog.server.js';
export { ComfyServer } from './comfyui/comfyui.server.js';
export { ReplicateServer } from './replicate/replicate.server.js';
export { plainImage } from './plain-image.js';
export { renderOutputs } from './renderer.js';
export { CARD_HEIGHT, CARD_WIDTH } from './local/product-card.pipeline.js';
export { ThreadedLocalEngine } from './local/threaded-local.engine.js';
export { decodeImage } from './local/raw-image.js';
