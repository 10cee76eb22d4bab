import type { EngineRequest } from '../engine.js';
import type { RawImage } from './raw-image.js';

/** What a per-tool pipeline gets from {@link LocalEngine}. */
export interface PipelineContext {
  readonly request: EngineRequest;
  /**
   * Decode the named input image (EXIF orientation applied, pixel limit enforced). A missing or undecodable
   * input is a `PermanentEngineError('invalid_image')`. `alpha: true` keeps the input's transparency (RGBA).
   */
  image(name: string, options?: { alpha?: boolean }): Promise<RawImage>;
  /** The configured input pixel limit. */
  readonly limitInputPixels: number;
  /**
   * Call between steps: throws when the job was cancelled, and reports `done` (the share of the job behind it, below
   * {@link PIPELINE_DONE}) as the job's progress.
   */
  checkpoint(done: number): void;
}

/** One tool's image processing: inputs in, one raw image out (RGB or RGBA; the engine hands back RGB). */
export type Pipeline = (context: PipelineContext) => Promise<RawImage>;

/** The progress a pipeline reaches as it hands back its image; the rest is the result's conversion and encoding. */
export const PIPELINE_DONE = 0.9;
