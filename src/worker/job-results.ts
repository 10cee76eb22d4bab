import { createHash } from 'node:crypto';
import { count } from '../common/count.js';
import type { JobRuns } from '../jobs/engine-runs.js';
import type { JobRow } from '../jobs/history.repository.js';
import {
  type EngineImage,
  type EngineRequest,
  type EngineResult,
  PermanentEngineError,
  type ResolvedRoute,
} from '../engines/index.js';

/** One result of a job and the seed it was made with (undefined where the route's model takes none). */
export interface SeededImage {
  image: EngineImage;
  seed: number | undefined;
}

/**
 * A job's `num_outputs` results, made as its route says (ENGINES.md "Seeds and variants per kind"): by one run that
 * makes them all (a list output, a batch), or by one run each with seeds `seed`, `seed+1`, ... (`repeat`). A run whose
 * output is a list gives one result per item; more than asked for are dropped, fewer fail the job. Each run has its
 * record in `runs`, which a later attempt resumes.
 */
export async function generateResults(
  route: ResolvedRoute,
  job: JobRow,
  request: Omit<EngineRequest, 'runs'>,
  runs: JobRuns,
): Promise<SeededImage[]> {
  const { variants } = route;
  const wanted = job.numOutputs;
  const seed = variants.seed ? (job.seed ?? drawnSeed(job.id)) : undefined;
  const results: SeededImage[] = [];
  if (variants.several !== 'repeat') {
    const made = await route.engine.generate({
      ...request,
      runs: runs.run(0),
      seed,
      outputs: variants.several === 'batch' ? wanted : 1,
    });
    for (const image of imagesOf(made)) results.push({ image, seed });
  } else {
    for (let run = 0; run < wanted && results.length < wanted; run++) {
      const runSeed = seed === undefined ? undefined : (seed + run) % 2 ** 32;
      const made = await route.engine.generate({
        ...request,
        // Each run is a model run of its own on the server: named apart, and resumed by a later attempt as its own.
        jobId: run === 0 ? request.jobId : `${request.jobId}-${run}`,
        runs: runs.run(run),
        seed: runSeed,
        outputs: wanted - results.length,
        onProgress: (fraction) => request.onProgress?.((run + fraction) / wanted),
      });
      for (const image of imagesOf(made)) results.push({ image, seed: runSeed });
    }
  }
  if (results.length < wanted) {
    const message = `The model made ${count(results.length, 'result')} of the ${wanted} asked for.`;
    throw new PermanentEngineError('engine_failed', message, message);
  }
  return results.slice(0, wanted);
}

function imagesOf(result: EngineResult): readonly EngineImage[] {
  return Array.isArray(result) ? (result as readonly EngineImage[]) : [result as EngineImage];
}

/**
 * The seed of a job that sent none, for a route whose model takes one: drawn from the job id, so that every attempt
 * of the job draws the same and the item can tell it.
 */
function drawnSeed(jobId: string): number {
  return createHash('sha256').update(`seed:${jobId}`).digest().readUInt32BE(0);
}
