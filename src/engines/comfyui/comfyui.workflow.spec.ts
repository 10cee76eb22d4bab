import {
  ANY_SEED,
  decodeRun,
  describeRefusal,
  encodeRun,
  PromptProgress,
  promptIdFor,
  seedFor,
  seedRangeOf,
} from './comfyui.workflow.js';

/** A class as `GET /object_info` answers, with one input named seed. */
const seedClass = (spec: unknown, where: 'required' | 'optional' = 'required') => ({
  input: { [where]: { seed: spec } },
});

describe('comfyui workflow helpers', () => {
  it('derives a canonical UUID prompt id per job and run, the same on every call', () => {
    const sut = promptIdFor('job-1', 1);

    expect(sut).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(promptIdFor('job-1', 1)).toBe(sut);
    expect(promptIdFor('job-1', 2)).not.toBe(sut);
  });

  it('draws a safe integer seed from the job id, within the range given', () => {
    const small = { first: 1000, count: 10 };

    expect(Number.isSafeInteger(seedFor('job-1', ANY_SEED))).toBe(true);
    expect(seedFor('job-1', ANY_SEED)).toBe(seedFor('job-1', ANY_SEED));
    expect(seedFor('job-2', ANY_SEED)).not.toBe(seedFor('job-1', ANY_SEED));
    for (const job of ['job-1', 'job-2', 'job-3', 'job-4']) {
      expect(seedFor(job, small)).toBeGreaterThanOrEqual(1000);
      expect(seedFor(job, small)).toBeLessThanOrEqual(1009);
      expect(seedFor(job, small)).toBe(seedFor(job, small));
    }
  });

  it('takes the seeds an INT input declares, from 0 up where its range allows', () => {
    const kSampler = JSON.parse('["INT", {"default": 0, "min": 0, "max": 18446744073709551615}]') as unknown;

    expect(seedRangeOf(seedClass(kSampler), 'seed')).toEqual(ANY_SEED);
    expect(seedRangeOf(seedClass(['INT']), 'seed')).toEqual(ANY_SEED);
    expect(seedRangeOf(seedClass(['INT', { min: 0, max: 4294967295 }], 'optional'), 'seed')).toEqual({
      first: 0,
      count: 2 ** 32,
    });
    expect(seedRangeOf(seedClass(['INT', { min: -1, max: 100 }]), 'seed')).toEqual({ first: 0, count: 101 });
    expect(seedRangeOf(seedClass(['INT', { min: 2 ** 50, max: 2 ** 50 + 9 }]), 'seed')).toEqual({
      first: 2 ** 50,
      count: 10,
    });
  });

  it('says why an input takes no seed', () => {
    expect(seedRangeOf(seedClass(['STRING', { default: '' }]), 'seed')).toEqual({
      problem: 'whose input "seed" takes a STRING, not an INT',
    });
    expect(seedRangeOf(seedClass([['fixed', 'random']]), 'seed')).toEqual({
      problem: 'whose input "seed" takes one of a list of choices, not an INT',
    });
    expect(seedRangeOf(seedClass(['INT']), 'noise_seed')).toEqual({ problem: 'which has no input "noise_seed"' });
    expect(seedRangeOf(seedClass(['INT', { min: 5, max: 4 }]), 'seed')).toEqual({
      problem: 'whose input "seed" takes no seed this service can draw (min 5, max 4)',
    });
  });

  it('reads back the run record it wrote, and ignores one it did not', () => {
    for (const state of ['sending', 'queued', 'stopped'] as const) {
      const run = { promptId: promptIdFor('job-1', 2), run: 2, state };
      expect(decodeRun(encodeRun(run))).toEqual(run);
    }
    expect(decodeRun('r8_abc123')).toBeUndefined();
    expect(decodeRun(undefined)).toBeUndefined();
  });

  it("names each refusing node's class and id with its messages, or the prompt-wide error", () => {
    const nodeErrors = {
      error: { type: 'prompt_outputs_failed_validation', message: 'Prompt outputs failed validation' },
      node_errors: {
        '11': {
          class_type: 'LoadImage',
          errors: [{ message: 'Custom validation failed for node', details: 'image - Invalid image file: a.png' }],
        },
      },
    };
    const missing = { error: { type: 'missing_node_type', message: "Node 'X' not found.", details: "Node ID '#7'" } };

    expect(describeRefusal(nodeErrors)).toBe(
      'LoadImage 11: Custom validation failed for node: image - Invalid image file: a.png',
    );
    expect(describeRefusal(missing)).toBe("Node 'X' not found. Node ID '#7'");
  });

  it('rises with nodes done and sampler steps, never falling back', () => {
    const sut = new PromptProgress(4);

    const seen = [
      sut.cached(['1']),
      sut.executing('2'),
      sut.sampled(5, 10),
      sut.executing('3'),
      sut.sampled(1, 10),
      sut.executing(null),
    ];

    expect(seen).toEqual([0.25, 0.25, 0.375, 0.5, 0.525, 0.75]);
  });
});
