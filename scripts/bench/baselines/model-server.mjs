/**
 * A stand-in GPU for the `remote` bench: a model served with Cog's HTTP API (`PUT /predictions/{id}`, synchronous,
 * `GET /openapi.json`, `GET /health-check`) whose every prediction takes MODEL_MS and which runs at most SLOTS at
 * once (409 past that, as a busy Cog answers). Each answer is one fixed JPEG of OUTPUT_SIDE px, as a data URI. It
 * keeps when each prediction arrived and was answered (`GET /log`), so the bench can take the model's own time out
 * of the service's.
 *
 * Env: PORT, HOST (127.0.0.1), MODEL_MS (100), SLOTS (4), OUTPUT_SIDE (1024).
 */
import http from 'node:http';
import sharp from 'sharp';

const MODEL_MS = Number(process.env.MODEL_MS ?? 100);
const SLOTS = Number(process.env.SLOTS ?? 4);
const SIDE = Number(process.env.OUTPUT_SIDE ?? 1024);

const output = await sharp({ create: { width: SIDE, height: SIDE, channels: 3, background: '#7a5c3e' } })
  .jpeg({ quality: 85 })
  .toBuffer();
const outputUri = `data:image/jpeg;base64,${output.toString('base64')}`;
const schema = {
  openapi: '3.0.2',
  info: { title: 'Cog', version: '0.1.0' },
  paths: {},
  components: {
    schemas: {
      Input: {
        type: 'object',
        title: 'Input',
        required: ['image'],
        properties: { image: { type: 'string', format: 'uri' } },
      },
    },
  },
};
const log = [];
let running = 0;
let busyRefusals = 0;

const server = http.createServer((req, res) => {
  const json = (status, body) =>
    res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body));
  if (req.method === 'GET' && (req.url === '/ready' || req.url === '/health-check'))
    return json(200, { status: 'READY' });
  if (req.method === 'GET' && req.url === '/openapi.json') return json(200, schema);
  if (req.method === 'GET' && req.url === '/log') return json(200, { log, busyRefusals, slots: SLOTS });
  const match = /^\/predictions\/([^/]+)$/.exec(req.url ?? '');
  if (req.method !== 'PUT' || !match) return json(404, { detail: 'Not Found' });
  const receivedAt = Date.now();
  req.resume();
  req.on('end', () => {
    if (running >= SLOTS) {
      busyRefusals++;
      return json(409, { detail: 'Already running a prediction' });
    }
    running++;
    setTimeout(() => {
      running--;
      const answeredAt = Date.now();
      log.push({ id: match[1], receivedAt, answeredAt });
      json(200, { id: match[1], status: 'succeeded', output: outputUri, error: null, logs: '' });
    }, MODEL_MS);
  });
});
server.listen(Number(process.env.PORT), process.env.HOST ?? '127.0.0.1');
