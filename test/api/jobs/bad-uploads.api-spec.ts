import { once } from 'node:events';
import { rm, writeFile } from 'node:fs/promises';
import { type IncomingMessage, request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { expectMatchesContract } from '../../support/contract.js';
import { waitUntil } from '../../support/harness.js';
import { makeImage, withLeadingMetadata } from '../../support/jobs.js';
import { serviceForBlock } from '../../support/service-block.js';
import { createUserWithKey } from '../../support/service.js';
import { blackPng, file, filesUnder, peakRssBytes } from '../../support/uploads.js';
import { bearer, Client, CREATE_PATH, type FormValue, type ProblemBody, postJob } from '../../support/client.js';

const MIB = 1024 * 1024;

interface BadUpload {
  name: string;
  status: number;
  code: string;
  /** The field `errors` must name, when the problem lists offending fields. */
  field?: string;
  send(baseUrl: string, apiKey: string): Promise<Response>;
}

const png = async (width = 320, height = 400): Promise<FormValue> =>
  file(await makeImage(width, height), 'image.png', 'image/png');

/**
 * A multipart body with a valid boundary that stops in the middle of the image part, never closed: built by hand, as
 * no client would send it.
 */
async function cutOffMultipart(baseUrl: string, apiKey: string): Promise<Response> {
  const boundary = '----igs-test-boundary-7d3c1f';
  const image = await makeImage(320, 400);
  const body = Buffer.concat([
    Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="tool"\r\n\r\ndefault\r\n` +
        `--${boundary}\r\nContent-Disposition: form-data; name="image"; filename="image.png"\r\n` +
        'Content-Type: image/png\r\n\r\n',
    ),
    image.subarray(0, Math.floor(image.length / 2)),
  ]);
  return fetch(`${baseUrl}${CREATE_PATH}`, {
    method: 'POST',
    headers: { ...bearer(apiKey), 'Content-Type': `multipart/form-data; boundary=${boundary}` },
    body,
  });
}

const BAD_UPLOADS: BadUpload[] = [
  {
    name: 'a text file sent as the image',
    status: 415,
    code: 'unsupported_media_type',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, {
        tool: 'default',
        image: file(
          Buffer.from('This is a plain text file, not a picture at all.\n'.repeat(20)),
          'image.png',
          'image/png',
        ),
      }),
  },
  {
    name: 'an SVG named .png and declared image/png',
    status: 415,
    code: 'unsupported_media_type',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, {
        tool: 'default',
        image: file(
          Buffer.from(
            '<svg xmlns="http://www.w3.org/2000/svg" width="320" height="400"><rect width="100%" height="100%" fill="red"/></svg>',
          ),
          'image.png',
          'image/png',
        ),
      }),
  },
  {
    name: 'a truncated PNG',
    status: 415,
    code: 'unsupported_media_type',
    send: async (baseUrl, key) => {
      const whole = await makeImage(320, 400);
      return postJob(baseUrl, key, {
        tool: 'default',
        image: file(whole.subarray(0, Math.floor(whole.length * 0.6)), 'image.png', 'image/png'),
      });
    },
  },
  {
    name: 'an 8x8 PNG',
    status: 422,
    code: 'image_too_small',
    send: async (baseUrl, key) => postJob(baseUrl, key, { tool: 'default', image: await png(8, 8) }),
  },
  {
    name: 'an 8x8 JPEG whose header lies behind 150 KB of metadata',
    status: 422,
    code: 'image_too_small',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, {
        tool: 'default',
        image: file(withLeadingMetadata(await makeImage(8, 8, 'jpeg'), 150_000), 'image.jpg', 'image/jpeg'),
      }),
  },
  {
    name: 'a PNG within 8192 px a side but over 40 megapixels (8000x6000)',
    status: 422,
    code: 'image_too_large',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, { tool: 'default', image: file(await blackPng(8000, 6000), 'image.png', 'image/png') }),
  },
  {
    name: 'an 11 MiB file',
    status: 413,
    code: 'payload_too_large',
    send: async (baseUrl, key) => {
      const image = await makeImage(320, 400);
      // A real PNG at the start, then padding: the size alone must refuse it.
      const big = Buffer.concat([image, Buffer.alloc(11 * MIB - image.length, 0x5a)]);
      return postJob(baseUrl, key, { tool: 'default', image: file(big, 'image.png', 'image/png') });
    },
  },
  {
    name: 'more than 10 parts',
    status: 413,
    code: 'payload_too_large',
    send: async (baseUrl, key) => {
      const parts: [string, FormValue][] = [
        ['tool', 'default'],
        ['image', await png()],
      ];
      for (let i = 0; i < 9; i++) parts.push([`note${i}`, 'x']);
      return postJob(baseUrl, key, parts);
    },
  },
  {
    name: 'an unknown tool',
    status: 422,
    code: 'unknown_tool',
    send: async (baseUrl, key) => postJob(baseUrl, key, { tool: 'hat_swap', image: await png() }),
  },
  {
    name: 'no tool',
    status: 400,
    code: 'validation_failed',
    field: 'tool',
    send: async (baseUrl, key) => postJob(baseUrl, key, { image: await png() }),
  },
  {
    name: 'a required image missing',
    status: 400,
    code: 'validation_failed',
    field: 'person',
    send: async (baseUrl, key) => postJob(baseUrl, key, { tool: 'fashion_swap', clothes: await png() }),
  },
  {
    name: 'a field of another tool',
    status: 400,
    code: 'unexpected_field',
    field: 'person',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, { tool: 'fashion_card', clothes: await png(), person: await png() }),
  },
  {
    name: 'a field no tool has',
    status: 400,
    code: 'unexpected_field',
    field: 'colour',
    send: async (baseUrl, key) => postJob(baseUrl, key, { tool: 'default', image: await png(), colour: 'red' }),
  },
  {
    name: 'an image field sent twice',
    status: 400,
    code: 'unexpected_field',
    field: 'image',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, [
        ['tool', 'default'],
        ['image', await png()],
        ['image', await png()],
      ]),
  },
  {
    name: 'the tool field sent twice',
    status: 400,
    code: 'unexpected_field',
    field: 'tool',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, [
        ['tool', 'default'],
        ['tool', 'default'],
        ['image', await png()],
      ]),
  },
  {
    // Taken literally, not as `prompt` with a nested key (which once made the service answer 500).
    name: 'a bracketed field name, prompt[x]',
    status: 400,
    code: 'unexpected_field',
    field: 'prompt[x]',
    send: async (baseUrl, key) => postJob(baseUrl, key, { tool: 'default', image: await png(), 'prompt[x]': 'warmer' }),
  },
  {
    name: 'a bracketed tool field, tool[x]',
    status: 400,
    code: 'unexpected_field',
    field: 'tool[x]',
    send: async (baseUrl, key) => postJob(baseUrl, key, { 'tool[x]': 'default', image: await png() }),
  },
  {
    // Once accepted with the file left behind in the upload folder, for good.
    name: 'an image sent as the webhook_url field',
    status: 400,
    code: 'validation_failed',
    field: 'webhook_url',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, { tool: 'default', image: await png(), webhook_url: await png() }),
  },
  {
    name: 'a field name in UTF-8, named back as sent',
    status: 400,
    code: 'unexpected_field',
    field: 'clöthes',
    send: async (baseUrl, key) => postJob(baseUrl, key, { tool: 'default', image: await png(), clöthes: 'red' }),
  },
  {
    name: 'a webhook_url of 5000 characters',
    status: 422,
    code: 'invalid_webhook_url',
    field: 'webhook_url',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, {
        tool: 'default',
        image: await png(),
        webhook_url: `https://hooks.example.com/${'a'.repeat(5000)}`,
      }),
  },
  {
    name: 'an empty generation type',
    status: 400,
    code: 'validation_failed',
    field: 'generation_type',
    send: async (baseUrl, key) => postJob(baseUrl, key, { tool: 'default', generation_type: '', image: await png() }),
  },
  {
    name: 'an Idempotency-Key sent twice',
    status: 400,
    code: 'validation_failed',
    field: 'Idempotency-Key',
    // Two header lines, as curl sends them; fetch would join them into one.
    send: async (baseUrl, key) => {
      const boundary = '----igs-test-boundary-2k';
      const body = Buffer.concat([
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="tool"\r\n\r\ndefault\r\n` +
            `--${boundary}\r\nContent-Disposition: form-data; name="image"; filename="image.png"\r\n\r\n`,
        ),
        await makeImage(320, 400),
        Buffer.from(`\r\n--${boundary}--\r\n`),
      ]);
      const answer = await new Promise<IncomingMessage>((resolve, reject) => {
        const sent = httpRequest(`${baseUrl}${CREATE_PATH}`, {
          method: 'POST',
          headers: {
            ...bearer(key),
            'Content-Type': `multipart/form-data; boundary=${boundary}`,
            'Idempotency-Key': ['a', 'b'],
          },
        });
        sent.on('response', resolve).on('error', reject).end(body);
      });
      const chunks: Buffer[] = [];
      for await (const chunk of answer) chunks.push(chunk as Buffer);
      return new Response(Buffer.concat(chunks), {
        status: answer.statusCode,
        headers: answer.headers as Record<string, string>,
      });
    },
  },
  {
    name: 'a multipart body with an empty boundary',
    status: 400,
    code: 'malformed_multipart',
    send: async (baseUrl, key) =>
      fetch(`${baseUrl}${CREATE_PATH}`, {
        method: 'POST',
        headers: { ...bearer(key), 'Content-Type': 'multipart/form-data; boundary=' },
        body: '--\r\nContent-Disposition: form-data; name="tool"\r\n\r\ndefault\r\n----\r\n',
      }),
  },
  {
    name: 'a generation type of another tool',
    status: 422,
    code: 'invalid_generation_type',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, {
        tool: 'fashion_swap',
        generation_type: 'enhance',
        clothes: await png(),
        person: await png(),
      }),
  },
  {
    name: 'a prompt of 1001 characters',
    status: 400,
    code: 'validation_failed',
    field: 'prompt',
    send: async (baseUrl, key) =>
      postJob(baseUrl, key, { tool: 'default', image: await png(), prompt: 'a'.repeat(1001) }),
  },
  {
    // A JSON job names its images by URL or stored file (test/api/jobs/inputs.api-spec.ts); it never carries them.
    name: 'JSON carrying the image itself, in base64',
    status: 400,
    code: 'validation_failed',
    field: 'image',
    send: async (baseUrl, key) =>
      fetch(`${baseUrl}${CREATE_PATH}`, {
        method: 'POST',
        headers: { ...bearer(key), 'Content-Type': 'application/json' },
        body: JSON.stringify({ tool: 'default', inputs: { image: (await makeImage(320, 400)).toString('base64') } }),
      }),
  },
  {
    name: 'a body neither multipart nor JSON',
    status: 400,
    code: 'malformed_multipart',
    send: async (baseUrl, key) =>
      fetch(`${baseUrl}${CREATE_PATH}`, {
        method: 'POST',
        headers: { ...bearer(key), 'Content-Type': 'text/plain' },
        body: 'tool=default',
      }),
  },
  {
    name: 'a multipart body cut off in the middle of a part',
    status: 400,
    code: 'malformed_multipart',
    send: cutOffMultipart,
  },
  {
    name: 'no Authorization header',
    status: 401,
    code: 'unauthorized',
    send: async (baseUrl) => postJob(baseUrl, undefined, { tool: 'default', image: await png() }),
  },
  {
    name: 'an unknown API key',
    status: 401,
    code: 'unauthorized',
    send: async (baseUrl) => postJob(baseUrl, 'igs_not-a-real-key', { tool: 'default', image: await png() }),
  },
];

describe('job creation refusing bad uploads', () => {
  // No worker: the checks are all the API's own.
  const block = serviceForBlock({ ROLE: 'api' });
  let apiKey: string;
  let tmpDir: string;
  let inputDir: string;

  beforeAll(async () => {
    apiKey = await createUserWithKey(block.env.databaseUrl);
    tmpDir = block.env.serviceEnv.UPLOAD_TMP_DIR;
    inputDir = block.env.serviceEnv.INPUT_ROOT;
  });

  /** The answer is the documented problem, and the refused upload left nothing behind. */
  async function expectRefused(response: Response, upload: Pick<BadUpload, 'status' | 'code' | 'field'>) {
    expect(response.status).toBe(upload.status);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    const body = (await expectMatchesContract(response, 'POST', CREATE_PATH)) as ProblemBody;
    expect(body).toMatchObject({ type: `urn:igs:problem:${upload.code}`, status: upload.status, code: upload.code });
    if (upload.field) expect(body.errors).toContainEqual(expect.objectContaining({ field: upload.field }));

    expect(await filesUnder(tmpDir)).toEqual([]);
    expect(await filesUnder(inputDir)).toEqual([]);
    const history = await new Client(block.sut.baseUrl, apiKey).list();
    expect(history.status).toBe(200);
    expect(history.body.total).toBe(0);
    return body;
  }

  it.each(BAD_UPLOADS)(
    'refuses $name with $status $code and keeps nothing',
    async (upload) => {
      const response = await upload.send(block.sut.baseUrl, apiKey);

      await expectRefused(response, upload);
    },
    30_000,
  );

  it('challenges a missing or unknown key with WWW-Authenticate', async () => {
    const missing = await postJob(block.sut.baseUrl, undefined, { tool: 'default', image: await png() });
    const unknown = await postJob(block.sut.baseUrl, 'igs_not-a-real-key', { tool: 'default', image: await png() });

    expect([missing.status, unknown.status]).toEqual([401, 401]);
    expect(missing.headers.get('www-authenticate')).toBe('Bearer');
    expect(unknown.headers.get('www-authenticate')).toBe('Bearer error="invalid_token"');
  });

  it('refuses a 20000x20000 PNG bomb from its header, without decoding it', async () => {
    const bomb = await blackPng(20_000, 20_000);
    expect(bomb.length).toBeLessThan(MIB);
    const peakBefore = await peakRssBytes(block.sut.process.pid!);

    const response = await postJob(block.sut.baseUrl, apiKey, {
      tool: 'default',
      image: file(bomb, 'image.png', 'image/png'),
    });

    await expectRefused(response, { status: 422, code: 'image_too_large' });
    // Decoding it would take 400 MB (one byte a pixel) at the very least.
    const peakAfter = await peakRssBytes(block.sut.process.pid!);
    expect(peakAfter - peakBefore).toBeLessThan(100 * MIB);
    expect((await fetch(`${block.sut.baseUrl}/health/live`)).status).toBe(200);
  }, 30_000);

  it('removes what it stored of an upload whose client went away in the middle of a file', async () => {
    const boundary = '----igs-test-boundary-gone';
    const image = Buffer.concat([await makeImage(320, 400), Buffer.alloc(4 * MIB, 0x5a)]);
    const head = Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="tool"\r\n\r\ndefault\r\n` +
        `--${boundary}\r\nContent-Disposition: form-data; name="image"; filename="image.png"\r\n` +
        'Content-Type: image/png\r\n\r\n',
    );
    const { hostname, port } = new URL(block.sut.baseUrl);
    const socket = connect(Number(port), hostname);
    await once(socket, 'connect');
    socket.write(
      `POST ${CREATE_PATH} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nAuthorization: Bearer ${apiKey}\r\n` +
        `Content-Type: multipart/form-data; boundary=${boundary}\r\nContent-Length: ${head.length + image.length + 100}\r\n\r\n`,
    );
    socket.write(head);
    socket.write(image.subarray(0, 2 * MIB));
    // Part of the file is on disk before the client goes.
    await waitUntil(async () => (await filesUnder(tmpDir)).length === 1, 'a temporary file');

    socket.destroy();

    await waitUntil(async () => (await filesUnder(tmpDir)).length === 0, 'the temporary file to be removed');
    expect(await filesUnder(inputDir)).toEqual([]);
    expect((await new Client(block.sut.baseUrl, apiKey).list()).body.total).toBe(0);
  }, 30_000);

  it('is still up and accepting jobs after all of them', async () => {
    expect(block.sut.process.exitCode).toBeNull();
    expect((await fetch(`${block.sut.baseUrl}/health/live`)).status).toBe(200);

    const response = await postJob(block.sut.baseUrl, apiKey, { tool: 'default', image: await png() });

    expect(response.status).toBe(202);
    await expectMatchesContract(response, 'POST', CREATE_PATH);
    expect((await new Client(block.sut.baseUrl, apiKey).list()).body.total).toBe(1);
  });
});

describe('job creation when the service cannot store an upload', () => {
  const block = serviceForBlock({ ROLE: 'api' });

  it('answers a failure of its own disk as its own (500), not as a bad request', async () => {
    const apiKey = await createUserWithKey(block.env.databaseUrl);
    // The upload folder replaced by a file: no upload can be created in it any more.
    const tmpDir = block.env.serviceEnv.UPLOAD_TMP_DIR;
    await rm(tmpDir, { recursive: true, force: true });
    await writeFile(tmpDir, 'not a folder');

    const response = await postJob(block.sut.baseUrl, apiKey, { tool: 'default', image: await png() });

    expect(response.status).toBe(500);
    expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(await response.json()).toMatchObject({ status: 500, code: 'internal_error' });
    expect((await new Client(block.sut.baseUrl, apiKey).list()).body.total).toBe(0);
  }, 30_000);
});
