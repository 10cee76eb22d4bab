#!/usr/bin/env node
/**
 * The mock a frontend builds against (`npm run mock`): Prism serves the contract's examples, and in front of it this
 * server answers the media paths with real example images (the local engine's outputs in docs/examples, so a page
 * built on the mock shows pictures) and serves the playground (dist/playground, built by `npm run build`).
 *
 *   MOCK_HOST (127.0.0.1), MOCK_PORT (4010)
 *
 * Every other request goes to Prism unchanged, which validates it against the contract and answers the
 * documented example (401 without a bearer key, 422 for a request the contract does not allow).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { createServer, request as forward } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import { extname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';
import sharp from 'sharp';

const root = fileURLToPath(new URL('..', import.meta.url));
const host = process.env.MOCK_HOST ?? '127.0.0.1';
const port = Number(process.env.MOCK_PORT ?? 4010);
const PLAYGROUND = join(root, 'dist/playground');
const TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.map': 'application/json',
};
/** The drawn examples' outputs: a media path's id picks one, the same one every time. */
const RESULTS = [
  'fashion_swap',
  'fashion_swap_half-upper',
  'fashion_swap_half-lower',
  'lengerie',
  'fashion_card',
  'furniture',
  'fabric',
  'default',
].map((example) => join(root, 'docs/examples', example, 'output.jpg'));

const prismPort = await freePort();
const prism = spawn(
  join(root, 'node_modules/.bin/prism'),
  ['mock', '-h', '127.0.0.1', '-p', String(prismPort), join(root, 'openapi/openapi.yaml')],
  { stdio: ['ignore', 'inherit', 'inherit'] },
);
prism.once('exit', (code) => {
  console.error(`prism exited (${code}); the mock stops`);
  process.exit(1);
});
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, () => {
    prism.kill('SIGTERM');
    process.exit(0);
  });
}

const server = createServer((request, response) => {
  const path = decodeURIComponent((request.url ?? '/').split('?')[0]);
  const media = /^\/media\/([0-9a-fA-F-]{36})\/(preview\.webp|stock\.jpg)$/.exec(path);
  const handled =
    request.method === 'GET' || request.method === 'HEAD'
      ? media
        ? serveMedia(media[1], media[2], response)
        : path === '/playground' || path.startsWith('/playground/')
          ? servePlayground(path, response)
          : null
      : null;
  if (handled) {
    handled.catch((error) => {
      response.writeHead(500, { 'Content-Type': 'text/plain' }).end(String(error));
    });
    return;
  }
  const upstream = forward(
    { host: '127.0.0.1', port: prismPort, method: request.method, path: request.url, headers: request.headers },
    (answer) => {
      response.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(response);
    },
  );
  upstream.on('error', (error) => response.writeHead(502, { 'Content-Type': 'text/plain' }).end(String(error)));
  request.pipe(upstream);
});

await waitForPrism();
server.listen(port, host, () => {
  console.log(`mock: http://${host}:${port} (playground: http://${host}:${port}/playground/)`);
});

/** A real image for any media path, as the service serves one: a preview WebP (<= 512 px) or the full JPEG. */
async function serveMedia(id, file, response) {
  const digest = createHash('sha256').update(id.toLowerCase()).digest();
  const source = RESULTS[digest[0] % RESULTS.length];
  const body =
    file === 'stock.jpg'
      ? await readFile(source)
      : await sharp(source).resize(512, 512, { fit: 'inside' }).webp({ quality: 80 }).toBuffer();
  response.writeHead(200, {
    'Content-Type': file === 'stock.jpg' ? 'image/jpeg' : 'image/webp',
    'Content-Length': body.length,
    'Cache-Control': 'public, max-age=31536000, immutable',
    // As the service: media may be shown by frontends on any origin.
    'Cross-Origin-Resource-Policy': 'cross-origin',
    'Access-Control-Allow-Origin': '*',
  });
  response.end(body);
}

async function servePlayground(path, response) {
  if (path === '/playground') {
    response.writeHead(301, { Location: '/playground/' }).end();
    return;
  }
  const relative = normalize(path.slice('/playground/'.length) || 'index.html');
  const file = join(PLAYGROUND, relative);
  const type = TYPES[extname(file)];
  if (relative.startsWith('..') || !type || !(await stat(file).catch(() => null))?.isFile()) {
    response.writeHead(404, { 'Content-Type': 'text/plain' }).end('not found (run `npm run build` for the playground)');
    return;
  }
  response.writeHead(200, { 'Content-Type': type, 'Cache-Control': 'no-cache' });
  createReadStream(file).pipe(response);
}

async function waitForPrism() {
  for (let attempt = 0; attempt < 300; attempt++) {
    try {
      const answer = await fetch(`http://127.0.0.1:${prismPort}/health/live`);
      await answer.body?.cancel();
      return;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
  throw new Error('prism did not start within 60 s');
}

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createNetServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port: free } = probe.address();
      probe.close(() => resolve(free));
    });
  });
}
