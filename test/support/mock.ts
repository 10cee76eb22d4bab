import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { freePort } from './service.js';

const MOCK = new URL('../../scripts/mock.mjs', import.meta.url).pathname;

export interface RunningMock {
  baseUrl: string;
  stop(): Promise<void>;
}

/** `npm run mock`'s server (scripts/mock.mjs) on a free port, once it answers; the playground must be built. */
export async function startMock(): Promise<RunningMock> {
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const mock = spawn(process.execPath, [MOCK], {
    env: { PATH: process.env.PATH, MOCK_PORT: String(port) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = once(mock, 'exit');
  let output = '';
  mock.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  mock.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const stop = async () => {
    if (mock.exitCode === null && mock.signalCode === null) {
      mock.kill('SIGTERM');
      await exited;
    }
  };
  for (;;) {
    if (mock.exitCode !== null) throw new Error(`the mock exited with ${mock.exitCode}:\n${output}`);
    try {
      if ((await fetch(`${baseUrl}/health/live`)).ok) return { baseUrl, stop };
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}
