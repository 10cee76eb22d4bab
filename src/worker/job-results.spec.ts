import type { RouteVariants } from '../config/engine-settings.js';
import type { EngineImage, EngineRequest, EngineResult, ResolvedRoute } from '../engines/index.js';
import { PermanentEngineError } from '../engines/index.js';
import type { JobRuns } from '../jobs/engine-runs.js';
import type { JobRow } from '../jobs/history.repository.js';
import { memoryRuns } from '../../test/support/run-record.js';
import { generateResults } from './job-results.js';

const JOB: JobRow = {
  id: '3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44',
  userId: 'user-1',
  tool: 'default',
  generationType: 'enhance',
  status: 'pending',
  inputs: {},
  texts: {},
  seed: null,
  numOutputs: 1,
};

const REQUEST: EngineRequest = { jobId: JOB.id, tool: 'default', generationType: 'enhance', images: {}, texts: {} };

/** A job's run records kept in memory, one per run index, as EngineRuns keeps them in Redis. */
function jobRuns(): JobRuns & { byRun: Map<number, ReturnType<typeof memoryRuns>> } {
  const byRun = new Map<number, ReturnType<typeof memoryRuns>>();
  return {
    byRun,
    run: (index) => {
      if (!byRun.has(index)) byRun.set(index, memoryRuns());
      return byRun.get(index)!;
    },
    forget: () => {
      byRun.clear();
      return Promise.resolve();
    },
  };
}

/** An image standing for one result, told apart by its first byte. */
const image = (n: number): EngineImage => ({ kind: 'encoded', data: Buffer.from([n]) });

/** A route whose engine records every request and answers what `answer` makes of it. */
function routeOf(variants: RouteVariants, answer: (request: EngineRequest, run: number) => EngineResult) {
  const requests: EngineRequest[] = [];
  const route = {
    variants,
    engine: {
      generate: (request: EngineRequest) => {
        requests.push(request);
        return Promise.resolve(answer(request, requests.length - 1));
      },
    },
  } as unknown as ResolvedRoute;
  return { route, requests };
}

const firstBytes = (results: { image: EngineImage }[]) =>
  results.map(({ image: made }) => (made as { data: Buffer }).data[0]);

describe('generateResults', () => {
  it("asks a model that makes several at once for them in one run, each of the list's items a result with the job's seed", async () => {
    const { route, requests } = routeOf({ seed: true, several: 'batch', maxOutputs: 4 }, (request) =>
      Array.from({ length: request.outputs! }, (_, n) => image(n)),
    );

    const results = await generateResults(route, { ...JOB, seed: 5, numOutputs: 3 }, REQUEST, jobRuns());

    expect(requests.map(({ seed, outputs }) => ({ seed, outputs }))).toEqual([{ seed: 5, outputs: 3 }]);
    expect(firstBytes(results)).toEqual([0, 1, 2]);
    expect(results.map(({ seed }) => seed)).toEqual([5, 5, 5]);
  });

  it('runs a model that makes one a run once per result, with seeds seed, seed+1, ... (wrapping past 2^32 - 1), each run named apart', async () => {
    const { route, requests } = routeOf({ seed: true, several: 'repeat', maxOutputs: 4 }, (_request, run) =>
      image(run),
    );

    const results = await generateResults(route, { ...JOB, seed: 2 ** 32 - 2, numOutputs: 3 }, REQUEST, jobRuns());

    expect(requests.map(({ jobId, seed }) => [jobId, seed])).toEqual([
      [JOB.id, 2 ** 32 - 2],
      [`${JOB.id}-1`, 2 ** 32 - 1],
      [`${JOB.id}-2`, 0],
    ]);
    expect(results.map(({ seed }) => seed)).toEqual([2 ** 32 - 2, 2 ** 32 - 1, 0]);
    expect(firstBytes(results)).toEqual([0, 1, 2]);
  });

  it('draws the seed of a job that sent none from its id, the same on every attempt, and sends none to a model that takes none', async () => {
    const seeded = routeOf({ seed: true, several: 'none', maxOutputs: 1 }, () => image(0));
    const unseeded = routeOf({ seed: false, several: 'none', maxOutputs: 1 }, () => image(0));

    const [first] = await generateResults(seeded.route, JOB, REQUEST, jobRuns());
    const [again] = await generateResults(seeded.route, JOB, REQUEST, jobRuns());
    const [other] = await generateResults(seeded.route, { ...JOB, id: 'another-job' }, REQUEST, jobRuns());
    const [none] = await generateResults(unseeded.route, JOB, REQUEST, jobRuns());

    expect(first.seed).toEqual(expect.any(Number));
    expect(again.seed).toBe(first.seed);
    expect(other.seed).not.toBe(first.seed);
    expect(none.seed).toBeUndefined();
    expect(unseeded.requests[0].seed).toBeUndefined();
  });

  it('keeps the results asked for of a longer list, and fails the job engine_failed when the model made fewer', async () => {
    const longer = routeOf({ seed: false, several: 'batch', maxOutputs: 4 }, () => [image(0), image(1), image(2)]);
    const shorter = routeOf({ seed: false, several: 'batch', maxOutputs: 4 }, () => [image(0)]);

    const kept = await generateResults(longer.route, { ...JOB, numOutputs: 2 }, REQUEST, jobRuns());
    const failure = await generateResults(shorter.route, { ...JOB, numOutputs: 2 }, REQUEST, jobRuns()).catch(
      (error: unknown) => error,
    );

    expect(firstBytes(kept)).toEqual([0, 1]);
    expect(failure).toBeInstanceOf(PermanentEngineError);
    expect(failure).toMatchObject({
      code: 'engine_failed',
      clientMessage: 'The model made 1 result of the 2 asked for.',
    });
  });

  it('gives each run of a repeat route its own record, so that a later attempt resumes every run an earlier one started', async () => {
    const runs = jobRuns();
    let created = 0;
    let failAtRun: number | undefined = 2;
    // A model server's run, as a remote engine starts or resumes it: a recorded run is followed, not started again.
    const { route } = routeOf({ seed: true, several: 'repeat', maxOutputs: 4 }, () => image(0));
    route.engine.generate = async (request) => {
      let run = await request.runs!.recall();
      if (run === undefined) {
        run = `run-${created++}`;
        await request.runs!.remember(run);
      }
      // The first attempt's worker dies while its third run is on the model.
      if (failAtRun !== undefined && run === `run-${failAtRun}`) throw new Error('the worker died');
      return image(Number(run.slice('run-'.length)));
    };
    const job = { ...JOB, seed: 9, numOutputs: 3 };

    const first = await generateResults(route, job, REQUEST, runs).catch((error: unknown) => error);
    failAtRun = undefined;
    const again = await generateResults(route, job, REQUEST, runs);

    expect(first).toEqual(new Error('the worker died'));
    expect(created).toBe(3);
    expect(firstBytes(again)).toEqual([0, 1, 2]);
    expect([...runs.byRun.keys()]).toEqual([0, 1, 2]);
  });
});
