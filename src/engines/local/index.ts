export { LOCAL_PIPELINES, LocalEngine, type LocalEngineOptions } from './local.engine.js';
export type { Pipeline, PipelineContext } from './pipeline.js';
export { CARD_HEIGHT, CARD_WIDTH } from './product-card.pipeline.js';
export { MAX_INPUT_PIXELS, type RawImage } from './raw-image.js';
export { ThreadedLocalEngine } from './threaded-local.engine.js';
