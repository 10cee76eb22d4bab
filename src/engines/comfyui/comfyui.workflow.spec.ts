import { decodeRun, describeRefusal, encodeRun, PromptProgress, promptIdFor, seedFor } from './comfyui.workflow.js';

describe('comfyui workflow helpers', () => {
  it('derives a canonical UUID prompt id per job and run, the same on every call', () => {
    const sut = promptIdFor('job-1', 1);

    expect(sut).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(promptIdFor('job-1', 1)).toBe(sut);
    expect(promptIdFor('job-1', 2)).not.toBe(sut);
  });

  it('draws a safe integer seed from the job id', () => {
    expect(Number.isSafeInteger(seedFor('job-1'))).toBe(true);
    expect(seedFor('job-1')).toBe(seedFor('job-1'));
    expect(seedFor('job-2')).not.toBe(seedFor('job-1'));
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
