import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer, request as forward, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

const PRISM = join(process.cwd(), 'node_modules/.bin/prism');
const PRISM_START_TIMEOUT_MS = 60_000;

/** A request that broke the document, or an answer that did: Prism's own error answers, and `sl-violations`. */
export interface PrismViolation {
  method: string;
  path: string;
  status: number;
  detail: string;
}

export interface PrismProxy {
  /** The base URL clients use: paths as in the document (no `/v1`). */
  url: string;
  violations: PrismViolation[];
  close(): Promise<void>;
}

/**
 * `prism proxy <document> <upstream> --errors` behind a small front, so every JSON request a client sends, and every
 * answer, is checked against the document. Prism forwards `/x` to `<upstream>/x` (it ignores the document's server
 * path), and corrupts binary bodies both ways (stoplightio/prism issues 2349 and 1321): requests for which `direct`
 * holds (multipart uploads, image downloads) go straight to the upstream, and the test checks those itself.
 */
export async function startPrismProxy(options: {
  document: string;
  upstream: string;
  direct: (method: string, path: string) => boolean;
}): Promise<PrismProxy> {
  const prismPort = await freePort();
  const prism: ChildProcess = spawn(
    PRISM,
    ['proxy', options.document, options.upstream, '--errors', '-h', '127.0.0.1', '-p', String(prismPort)],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let prismLog = '';
  prism.stdout?.on('data', (chunk: Buffer) => (prismLog = (prismLog + chunk.toString('utf8')).slice(-20_000)));
  prism.stderr?.on('data', (chunk: Buffer) => (prismLog = (prismLog + chunk.toString('utf8')).slice(-20_000)));
  const upstream = new URL(options.upstream.replace(/\/+$/, '') + '/');
  const violations: PrismViolation[] = [];

  /**
   * Prism's own error answers (a request the document refuses), and answers it reports breaking the document. An
   * answer status the document does not list (Replicate's 4xx and 5xx are not in it) is only a warning there.
   */
  const watch = (method: string, path: string, answer: IncomingMessage) => {
    const status = answer.statusCode ?? 0;
    const reported = answer.headers['sl-violations'];
    if (typeof reported === 'string') {
      const errors = (JSON.parse(reported) as { severity?: string }[]).filter((item) => item.severity === 'Error');
      if (errors.length > 0) violations.push({ method, path, status, detail: JSON.stringify(errors) });
    }
    if (!/problem\+json/.test(answer.headers['content-type'] ?? '')) return;
    const chunks: Buffer[] = [];
    answer.on('data', (chunk: Buffer) => chunks.push(chunk));
    answer.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      if (body.includes('stoplight.io/prism/errors')) violations.push({ method, path, status, detail: body });
    });
  };

  const server: Server = createServer((request, response) => {
    const method = request.method ?? 'GET';
    const path = request.url ?? '/';
    const direct = options.direct(method, path.split('?')[0]);
    const target = direct
      ? { host: upstream.hostname, port: upstream.port, path: `${upstream.pathname.replace(/\/$/, '')}${path}` }
      : { host: '127.0.0.1', port: prismPort, path };
    const headers = { ...request.headers, host: `${target.host}:${target.port}` };
    const outgoing = forward({ ...target, method, headers }, (answer: IncomingMessage) => {
      if (!direct) watch(method, path, answer);
      response.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(response);
    });
    outgoing.on('error', () => response.destroy());
    request.pipe(outgoing);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const deadline = Date.now() + PRISM_START_TIMEOUT_MS;
  for (;;) {
    if (prism.exitCode !== null) throw new Error(`prism exited (${prism.exitCode}):\n${prismLog}`);
    const up = await fetch(`http://127.0.0.1:${prismPort}/`).then(
      () => true,
      () => false,
    );
    if (up) break;
    if (Date.now() > deadline) {
      prism.kill('SIGTERM');
      throw new Error(`prism did not start within ${PRISM_START_TIMEOUT_MS} ms:\n${prismLog}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }

  return {
    url,
    violations,
    async close() {
      const closed = once(server, 'close');
      server.close();
      server.closeAllConnections();
      await closed;
      if (prism.exitCode === null) {
        const exited = once(prism, 'exit');
        prism.kill('SIGTERM');
        await exited;
      }
    },
  };
}

async function freePort(): Promise<number> {
  const probe = createServer();
  probe.listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const { port } = probe.address() as AddressInfo;
  probe.close();
  await once(probe, 'close');
  return port;
}
