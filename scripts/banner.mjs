// Marks generated files so nobody edits them by hand: `npm run gen` rewrites them from openapi/openapi.yaml.
import { readFileSync, writeFileSync } from 'node:fs';

const BANNER = '// DO NOT EDIT. Generated from openapi/openapi.yaml by `npm run gen` (openapi-typescript).\n';
for (const file of process.argv.slice(2)) {
  const text = readFileSync(file, 'utf8');
  if (!text.startsWith(BANNER)) writeFileSync(file, BANNER + text);
}
