import { inputsFor } from './jobs.js';
import { startService } from './service.js';
import { postJob, waitForFinal } from './client.js';

/**
 * Complete items of the key's user, one per tool given: created through the API at `apiBaseUrl` (ROLE=api) and
 * run by a worker started for them and stopped again, so jobs the tests create later stay pending instead of
 * taking the CPU from the answers under test.
 */
export async function completeItems(
  apiBaseUrl: string,
  serviceEnv: Record<string, string>,
  apiKey: string,
  tools: string[],
): Promise<string[]> {
  const worker = await startService({ ...serviceEnv, ROLE: 'worker' });
  try {
    const ids: string[] = [];
    for (const tool of tools) {
      const created = await postJob(apiBaseUrl, apiKey, await inputsFor(tool));
      if (created.status !== 202)
        throw new Error(`creating a ${tool} job answered ${created.status}: ${await created.text()}`);
      const { history_item_id: id } = (await created.json()) as { history_item_id: string };
      const item = await waitForFinal(apiBaseUrl, apiKey, id);
      if (item.status !== 'complete')
        throw new Error(`the ${tool} job ended as ${item.status}: ${JSON.stringify(item.error)}`);
      ids.push(id);
    }
    return ids;
  } finally {
    await worker.stop();
  }
}
