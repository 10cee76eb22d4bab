/**
 * The engines' one entry point for everything outside `src/engines/`: the worker, scripts and benches import from
 * here and never from an engine's own files (`npm run lint:deps` holds them to it).
 */
export * from './engine.js';
export { EngineRegistry } from './engine-registry.js';
export { EnginesModule } from './engines.module.js';
export { REQUEST_ATTEMPTS } from './remote-http.js';
/** Each kind's server, as the registry builds it from the routing file (and the kinds' integration tests do). */
export { CogServer } from './cog/cog.server.js';
export { ComfyServer } from './comfyui/comfyui.server.js';
export { ReplicateServer } from './replicate/replicate.server.js';
export { plainImage } from './plain-image.js';
export { renderOutputs } from './renderer.js';
export { LocalEngine } from './local/local.engine.js';
export { CARD_HEIGHT, CARD_WIDTH } from './local/product-card.pipeline.js';
export { ThreadedLocalEngine } from './local/threaded-local.engine.js';
/** For the person bench: the models' load and one analysis, timed apart from a whole job. */
export { analysePerson, personModels } from './local/person-model.js';
export { decodeImage } from './local/raw-image.js';
