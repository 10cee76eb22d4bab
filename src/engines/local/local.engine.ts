import { type Engine, type EngineImage, type EngineRequest, PermanentEngineError } from '../engine.js';
import { enhancePipeline } from './enhance.pipeline.js';
import { fabricRetexturePipeline } from './fabric.pipeline.js';
import {
  fashionSwapFullPipeline,
  fashionSwapLowerPipeline,
  fashionSwapUpperPipeline,
  lingerieSwapPipeline,
} from './fashion-swap.pipeline.js';
import { furniturePlacementPipeline } from './furniture.pipeline.js';
import { PIPELINE_DONE, type Pipeline, type PipelineContext } from './pipeline.js';
import { productCardPipeline } from './product-card.pipeline.js';
import { MAX_INPUT_PIXELS, type RawImage, checkAborted, decodeImage, toRgb } from './raw-image.js';

/** tool -> generation type -> pipeline. The tool catalogue's names (including the `lengerie` spelling). */
export const LOCAL_PIPELINES: Readonly<Record<string, Readonly<Record<string, Pipeline>>>> = {
  fashion_swap: { fashion_swap_full: fashionSwapFullPipeline },
  fashion_swap_half: { upper: fashionSwapUpperPipeline, lower: fashionSwapLowerPipeline },
  lengerie: { lengerie_swap: lingerieSwapPipeline },
  fashion_card: { product_card: productCardPipeline },
  furniture: { furniture_placement: furniturePlacementPipeline },
  fabric: { fabric_retexture: fabricRetexturePipeline },
  default: { enhance: enhancePipeline },
};

export interface LocalEngineOptions {
  /** Pixel limit for every decoded input (default 40 000 000, the upload limit). */
  limitInputPixels?: number;
}

/**
 * The `local` engine: deterministic sharp pipelines, one per tool, dispatched on `request.tool` and
 * `request.generationType` (see {@link LOCAL_PIPELINES}). Returns raw RGB pixels for the caller to encode, having
 * reported its steps through `request.onProgress` up to {@link PIPELINE_DONE}.
 */
export class LocalEngine implements Engine {
  private readonly limitInputPixels: number;

  constructor(options: LocalEngineOptions = {}) {
    this.limitInputPixels = options.limitInputPixels ?? MAX_INPUT_PIXELS;
  }

  /** Whether this engine has a pipeline for the tool / generation type pair. */
  supports(tool: string, generationType: string): boolean {
    return Object.hasOwn(LOCAL_PIPELINES, tool) && Object.hasOwn(LOCAL_PIPELINES[tool], generationType);
  }

  async generate(request: EngineRequest): Promise<EngineImage> {
    if (!this.supports(request.tool, request.generationType)) {
      throw new PermanentEngineError(
        'engine_failed',
        `the local engine has no pipeline for tool '${request.tool}' with generation type '${request.generationType}'`,
      );
    }
    checkAborted(request.signal);
    const pipeline = LOCAL_PIPELINES[request.tool][request.generationType];
    const result = toRgb(await pipeline(this.context(request)));
    checkAborted(request.signal);
    request.onProgress?.(PIPELINE_DONE);
    return { kind: 'raw', data: result.data, width: result.width, height: result.height, channels: 3 };
  }

  private context(request: EngineRequest): PipelineContext {
    const limitInputPixels = this.limitInputPixels;
    return {
      request,
      limitInputPixels,
      image(name: string, options: { alpha?: boolean } = {}): Promise<RawImage> {
        const input = Object.hasOwn(request.images, name) ? request.images[name] : undefined;
        if (!input) {
          return Promise.reject(new PermanentEngineError('invalid_image', `input image '${name}' is missing`));
        }
        return decodeImage(input, name, { alpha: options.alpha ?? false, limitInputPixels });
      },
      checkpoint(done: number): void {
        checkAborted(request.signal);
        request.onProgress?.(done);
      },
    };
  }
}
