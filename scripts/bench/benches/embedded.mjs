/**
 * embedded: the README's default start (no DATABASE_URL: the embedded PGlite database), ROLE=all as a newcomer runs
 * it, under 8 concurrent clients creating fashion_card jobs (512 px) for 8 s: creations a second and errors. Every
 * answer but 202 counts as an error (the per-user limits are raised out of the way).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import {
  createBenchEnv,
  createUserWithKey,
  describeLoad,
  freePort,
  log,
  makePhoto,
  multipartBody,
  NO_LIMITS,
  record,
  runLoad,
} from '../lib.mjs';

const CONCURRENCY = 8;
const DURATION_MS = 8_000;

export const description = `job creations/s and errors on the embedded default database, ${CONCURRENCY} concurrent clients`;

export async function run() {
  const clothes = await makePhoto('clothes', 512, 512);
  const form = multipartBody({ tool: 'fashion_card', clothes: { data: clothes, filename: 'clothes.jpg' } });
  const env = await createBenchEnv();
  try {
    const port = await freePort();
    const service = await env.startService({
      DATABASE_URL: '',
      EMBEDDED_DB_DIR: join(env.dataDir, 'pglite'),
      EMBEDDED_DB_PORT: String(port),
      ...NO_LIMITS,
    });
    // The embedded database speaks the wire protocol on its port, with the password kept in its directory: the key
    // is written there like any other.
    const password = (await readFile(join(env.dataDir, 'pglite', 'igs-wire-password'), 'utf8')).trim();
    const { authorization } = await createUserWithKey(`postgres://postgres:${password}@127.0.0.1:${port}/postgres`);
    const target = {
      url: `${service.baseUrl}/generation/generate_image_v2/`,
      method: 'POST',
      headers: { Authorization: authorization, 'Content-Type': form.contentType },
      body: form.body,
    };
    await runLoad({ ...target, concurrency: CONCURRENCY, durationMs: 2_000 });
    const result = await runLoad({ ...target, concurrency: CONCURRENCY, durationMs: DURATION_MS });
    log(`  ${describeLoad('embedded', result)}`);
    record(
      'embedded',
      `job creations/s, embedded database, ${CONCURRENCY} clients`,
      result.rps,
      `${result.rps.toFixed(0)} req/s (p50 ${result.p50.toFixed(0)} ms)`,
    );
    record(
      'embedded',
      'errors (any answer but 202, or no answer)',
      result.failed,
      `${result.failed} of ${result.sent}`,
      {
        op: '<=',
        value: 0,
        text: '0',
      },
    );
    await service.stop();
  } finally {
    await env.dispose();
  }
}
