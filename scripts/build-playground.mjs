// Builds the playground page (playground/) into dist/playground: its script bundled with the typed client and
// minified, its stylesheet minified, its HTML copied. The API serves that folder at /playground, the mock too.
import { copyFile, mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = fileURLToPath(new URL('..', import.meta.url));
const out = `${root}dist/playground`;
await mkdir(out, { recursive: true });
await build({
  entryPoints: [`${root}playground/app.ts`, `${root}playground/app.css`],
  outdir: out,
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2022', 'chrome111', 'firefox115', 'safari16'],
  sourcemap: true,
  legalComments: 'none',
  logLevel: 'warning',
});
for (const file of ['index.html', 'favicon.svg']) await copyFile(`${root}playground/${file}`, `${out}/${file}`);
