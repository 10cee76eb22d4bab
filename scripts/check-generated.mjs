// Fails when the contract types (src/generated/openapi.d.ts, which the client builds from too) are not what
// `npm run gen` makes of the contract today.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const committed = 'src/generated/openapi.d.ts';
const dir = mkdtempSync(join(tmpdir(), 'igs-gen-'));
try {
  const fresh = join(dir, 'openapi.d.ts');
  execFileSync('node_modules/.bin/openapi-typescript', ['openapi/openapi.yaml', '-o', fresh], { stdio: 'ignore' });
  execFileSync('node', ['scripts/banner.mjs', fresh]);
  if (readFileSync(fresh, 'utf8') !== readFileSync(committed, 'utf8')) {
    console.error(`${committed} out of date with openapi/openapi.yaml: run \`npm run gen\` and commit the result.`);
    process.exit(1);
  }
  console.log(`${committed} matches openapi/openapi.yaml`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
