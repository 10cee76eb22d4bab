import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

export const REPO_ROOT = new URL('../../', import.meta.url).pathname;
const DOCKERFILE = new URL('../../docker/Dockerfile', import.meta.url);
const COMPOSE_FILE = new URL('../../docker/compose.yml', import.meta.url);

/** The parts of a Compose service these tests look at. */
export interface ComposeService {
  image?: string;
  build?: { context: string; dockerfile: string };
  command?: string | string[];
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string }>;
  deploy?: { replicas?: number };
  healthcheck?: { disable?: boolean; test?: string[] };
  stop_grace_period?: string;
  [key: string]: unknown;
}

/** docker/compose.yml with YAML merge keys resolved, as Compose reads it. */
export function loadCompose(): { services: Record<string, ComposeService>; [key: string]: unknown } {
  return parse(readFileSync(COMPOSE_FILE, 'utf8'), { merge: true }) as { services: Record<string, ComposeService> };
}

/** Names of the settings .env.example documents, set or commented out: every variable the service reads. */
export function documentedSettings(): Set<string> {
  const text = readFileSync(new URL('../../.env.example', import.meta.url), 'utf8');
  return new Set([...text.matchAll(/^#?\s*([A-Z][A-Z0-9_]*)=/gm)].map((match) => match[1]));
}

/** The instructions of the Dockerfile's last stage (the runtime image), continuation lines joined. */
function runtimeInstructions(): string[] {
  const lines = readFileSync(DOCKERFILE, 'utf8')
    .replace(/\\\n\s*/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
  const lastFrom = lines.findLastIndex((line) => /^FROM\s/i.test(line));
  return lines.slice(lastFrom);
}

function instruction(name: string): string {
  const found = runtimeInstructions().find((line) => line.toUpperCase().startsWith(`${name} `));
  if (!found) throw new Error(`the runtime stage has no ${name}`);
  return found.slice(name.length + 1).trim();
}

/** The image's own environment (its ENV instructions). */
export function imageEnvironment(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const line of runtimeInstructions().filter((candidate) => /^ENV\s/i.test(candidate))) {
    for (const [, name, value] of line.slice(4).matchAll(/([A-Za-z_][A-Za-z0-9_]*)=(\S+)/g)) env[name] = value;
  }
  return env;
}

/** The image's start command (exec form). */
export function imageCommand(): string[] {
  return JSON.parse(instruction('CMD')) as string[];
}

/** The HEALTHCHECK's command (exec form), without its options. */
export function healthcheckCommand(): string[] {
  const [, command] = /\bCMD\s+(\[.*\])$/.exec(instruction('HEALTHCHECK')) ?? [];
  if (!command) throw new Error('the HEALTHCHECK has no exec-form CMD');
  return JSON.parse(command) as string[];
}

/** The Node.js release line the image is built on: the major version of its default `NODE_IMAGE`. */
export function imageNodeLine(): number {
  const [, major] = /^ARG NODE_IMAGE=node:(\d+)[-.]/m.exec(readFileSync(DOCKERFILE, 'utf8')) ?? [];
  if (!major) throw new Error('the Dockerfile has no default NODE_IMAGE of the form node:<major>-...');
  return Number(major);
}

/** The source paths of the runtime stage's and the build stages' COPY instructions from the build context. */
export function copiedPaths(): string[] {
  const lines = readFileSync(DOCKERFILE, 'utf8').split('\n');
  return lines
    .filter((line) => /^COPY\s/.test(line) && !/--from=/.test(line))
    .flatMap((line) => line.trim().split(/\s+/).slice(1, -1));
}

/**
 * Runs a command as the image would (from the repository root standing in for /app; `node` is this Node)
 * and resolves when it exits.
 */
export async function runToExit(
  command: string[],
  env: Record<string, string>,
  timeoutMs = 30_000,
): Promise<{ code: number | null; output: string }> {
  const [program, ...args] = command;
  const child = spawn(program === 'node' ? process.execPath : program, args, {
    cwd: REPO_ROOT,
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  // 'close', not 'exit': the output is whole only once the pipes have closed.
  const [code] = (await once(child, 'close')) as [number | null];
  clearTimeout(timer);
  return { code, output };
}
