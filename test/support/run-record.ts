import type { RunRecord } from '../../src/engines/index.js';

/** A job's record of its engine run, kept in memory instead of Redis; `value` is the run id it holds, for a test to read. */
export function memoryRuns(): RunRecord & { value: string | undefined } {
  const record = {
    value: undefined as string | undefined,
    recall: () => Promise.resolve(record.value),
    remember: (runId: string) => {
      record.value = runId;
      return Promise.resolve();
    },
    forget: () => {
      record.value = undefined;
      return Promise.resolve();
    },
  };
  return record;
}
