import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, utimes } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ListObjectsV2Command, type S3Client } from '@aws-sdk/client-s3';
import { createS3Client } from '../../src/media/s3-object-store.js';

const S3RVER_BIN = new URL('../../node_modules/s3rver/bin/s3rver.js', import.meta.url).pathname;
/** s3rver's built-in account: it answers no other keys. */
const ACCESS_KEY = 'S3RVER';
const START_TIMEOUT_MS = 15_000;

/** An S3-compatible server (s3rver) with one bucket, in a process of its own, on a free loopback port. */
export interface S3Server {
  endpoint: string;
  bucket: string;
  /** The environment that points the service at this server. */
  serviceEnv: Record<string, string>;
  client: S3Client;
  /** Every key in the bucket under `prefix`, sorted. */
  keys(prefix?: string): Promise<string[]>;
  /** Makes the object look written `ms` ago (s3rver's Last-Modified is its file's time). */
  backdate(key: string, ms: number): Promise<void>;
  stop(): Promise<void>;
}

export async function startS3Server(bucket = 'igs-test'): Promise<S3Server> {
  const directory = await mkdtemp(join(tmpdir(), 'igs-s3rver-'));
  // s3rver encrypts ListObjectsV2 continuation tokens with DES, which OpenSSL 3 offers only in its legacy
  // provider: the server runs as its own process with that provider, the tests' process stays as it is.
  const child: ChildProcess = spawn(
    process.execPath,
    [
      '--openssl-legacy-provider',
      S3RVER_BIN,
      '-d',
      directory,
      '-a',
      '127.0.0.1',
      '-p',
      '0',
      '--silent',
      '--configure-bucket',
      bucket,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const exited = once(child, 'exit');
  let output = '';
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`s3rver did not start:\n${output}`)), START_TIMEOUT_MS);
    const read = (chunk: Buffer) => {
      output += chunk.toString();
      const listening = /S3rver listening on [^\s:]+:(\d+)/.exec(output);
      if (listening) {
        clearTimeout(timer);
        resolve(Number(listening[1]));
      }
    };
    child.stdout!.on('data', read);
    child.stderr!.on('data', read);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`s3rver exited with ${code}:\n${output}`));
    });
  });

  const endpoint = `http://127.0.0.1:${port}`;
  // Configured as the service configures its own, so tests exercise the same client settings.
  const client = createS3Client({
    kind: 's3',
    endpoint,
    region: 'us-east-1',
    bucket,
    credentials: { accessKeyId: ACCESS_KEY, secretAccessKey: ACCESS_KEY },
    forcePathStyle: true,
  });
  return {
    endpoint,
    bucket,
    client,
    serviceEnv: {
      STORAGE: 's3',
      S3_ENDPOINT: endpoint,
      S3_REGION: 'us-east-1',
      S3_BUCKET: bucket,
      S3_ACCESS_KEY_ID: ACCESS_KEY,
      S3_SECRET_ACCESS_KEY: ACCESS_KEY,
      S3_FORCE_PATH_STYLE: 'true',
    },
    async keys(prefix = '') {
      const keys: string[] = [];
      let token: string | undefined;
      do {
        const page = await client.send(
          new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }),
        );
        keys.push(...(page.Contents ?? []).map((object) => object.Key!));
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
      return keys.sort();
    },
    async backdate(key, ms) {
      const parts = key.split('/');
      const file = join(directory, bucket, ...parts.slice(0, -1), `${parts.at(-1)}._S3rver_object`);
      const then = new Date(Date.now() - ms);
      await utimes(file, then, then);
    },
    async stop() {
      client.destroy();
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      await rm(directory, { recursive: true, force: true });
    },
  };
}

/**
 * A bucket that refuses to delete the objects of chosen items: an HTTP proxy in front of the server answering their
 * DeleteObjects with 500, as a store in trouble does, and passing everything else on unchanged (signatures included).
 */
export interface RefusingProxy {
  endpoint: string;
  /** Ids whose objects' deletes are refused. */
  refused: Set<string>;
  close(): Promise<void>;
}

export async function startRefusingProxy(s3: S3Server): Promise<RefusingProxy> {
  const upstream = new URL(s3.endpoint);
  const refused = new Set<string>();
  const server: Server = createServer((incoming, answer) => {
    const chunks: Buffer[] = [];
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on('end', () => {
      const body = Buffer.concat(chunks);
      const isDelete = incoming.method === 'POST' && new URL(incoming.url!, s3.endpoint).searchParams.has('delete');
      if (isDelete && [...refused].some((id) => body.includes(id))) {
        answer.writeHead(500, { 'Content-Type': 'application/xml' });
        answer.end('<?xml version="1.0"?><Error><Code>InternalError</Code><Message>refused</Message></Error>');
        return;
      }
      const forwarded = request(
        {
          host: upstream.hostname,
          port: upstream.port,
          method: incoming.method,
          path: incoming.url,
          headers: incoming.headers,
        },
        (response) => {
          answer.writeHead(response.statusCode!, response.headers);
          response.pipe(answer);
        },
      );
      forwarded.on('error', () => answer.destroy());
      forwarded.end(body);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    refused,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
