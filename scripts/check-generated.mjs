// Fails when a generated file (the service's and the client's contract types) is not what `npm run gen` makes of
// the contract today.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const committed = ['src/generated/openapi.d.ts', 'client/src/generated/openapi.d.ts'];
const dir = mkdtempSync(join(tmpdir(), 'igs-gen-'));
try {
  const fresh = join(dir, 'openapi.d.ts');
  execFileSync('node_modules/.bin/openapi-typescript', ['openapi/openapi.yaml', '-o', fresh], { stdio: 'ignore' });
  execFileSync('node', ['scripts/banner.mjs', fresh]);
  const stale = committed.filter((file) => readFileSync(fresh, 'utf8') !== readFileSync(file, 'utf8'));
  if (stale.length > 0) {
    console.error(
      `${stale.join(', ')} out of date with openapi/openapi.yaml: run \`npm run gen\` and commit the result.`,
    );
    process.exit(1);
  }
  console.log(`${committed.join(', ')} match openapi/openapi.yaml`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
