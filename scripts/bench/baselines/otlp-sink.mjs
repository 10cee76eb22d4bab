/**
 * The `tracing` bench's trace collector: an OTLP/HTTP receiver on loopback that reads every `POST /v1/traces` and
 * answers 200 with an empty response in the request's encoding, as a collector that keeps up would. It counts the
 * requests and bytes it got (GET /stats), so the bench can tell that spans were exported.
 *
 * Env: PORT, HOST (127.0.0.1).
 */
import http from 'node:http';

const stats = { requests: 0, bytes: 0 };

http
  .createServer((request, response) => {
    if (request.url === '/ready') return response.end('ok');
    if (request.url === '/stats') return response.end(JSON.stringify(stats));
    if (request.url !== '/v1/traces' || request.method !== 'POST') return response.writeHead(404).end();
    request.on('data', (chunk) => (stats.bytes += chunk.length));
    request.on('end', () => {
      stats.requests++;
      const json = request.headers['content-type']?.startsWith('application/json');
      response.writeHead(200, { 'Content-Type': json ? 'application/json' : 'application/x-protobuf' });
      response.end(json ? '{}' : undefined);
    });
  })
  .listen(Number(process.env.PORT), process.env.HOST ?? '127.0.0.1');
