/**
 * Baseline for the `create` bench: the least a job-creation endpoint must do with the same bodies. A bare
 * node:http server that streams each multipart file to a temporary file with busboy, reads each file's
 * header with `sharp(file).metadata()`, answers 202 with a small JSON body and removes the files.
 * No framework, no auth, no database, no queue.
 *
 * Env: PORT, HOST (127.0.0.1), TMP_DIR.
 */
import { randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import http from 'node:http';
import { join } from 'node:path';
import busboy from 'busboy';
import sharp from 'sharp';

const tmpDir = process.env.TMP_DIR;
await mkdir(tmpDir, { recursive: true });

function receive(req) {
  return new Promise((resolve, reject) => {
    const files = [];
    const fields = {};
    const writes = [];
    let parser;
    try {
      parser = busboy({
        headers: req.headers,
        limits: { fileSize: 10 * 1024 * 1024, parts: 10, files: 10, fields: 10, fieldNameSize: 100, fieldSize: 4000 },
      });
    } catch (error) {
      reject(error);
      return;
    }
    parser.on('file', (name, stream) => {
      const path = join(tmpDir, randomUUID());
      const out = createWriteStream(path);
      let bytes = 0;
      stream.on('data', (chunk) => (bytes += chunk.length));
      const file = { name, path, bytes };
      files.push(file);
      writes.push(new Promise((ok, fail) => out.on('close', ok).on('error', fail)));
      stream.pipe(out);
    });
    parser.on('field', (name, value) => (fields[name] = value));
    parser.on('error', reject);
    parser.on('close', () => Promise.all(writes).then(() => resolve({ files, fields }), reject));
    req.pipe(parser);
  });
}

const server = http.createServer(async (req, res) => {
  if (req.method === 'GET' && req.url === '/ready') {
    res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"ready":true}');
    return;
  }
  if (req.method !== 'POST') {
    res.writeHead(404).end();
    return;
  }
  let files = [];
  try {
    const upload = await receive(req);
    files = upload.files;
    const images = {};
    for (const file of files) {
      const { width, height, format } = await sharp(file.path, { limitInputPixels: false }).metadata();
      images[file.name] = { width, height, format, bytes: file.bytes };
    }
    const id = randomUUID();
    const body = JSON.stringify({
      history_item_id: id,
      preview_image: `media/${id}/preview.webp`,
      stock_image: `media/${id}/stock.jpg`,
      status: 'pending',
    });
    res.writeHead(202, { 'Content-Type': 'application/json', Location: `/user/generation-history/${id}` }).end(body);
  } catch (error) {
    res
      .writeHead(400, { 'Content-Type': 'application/json' })
      .end(JSON.stringify({ error: String(error?.message ?? error) }));
  } finally {
    await Promise.all(files.map((file) => rm(file.path, { force: true })));
  }
});
server.keepAliveTimeout = 65_000;
process.on('SIGTERM', () => server.closeAllConnections());
server.listen(Number(process.env.PORT), process.env.HOST ?? '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)));
