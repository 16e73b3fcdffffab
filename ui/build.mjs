// SPDX-License-Identifier: Apache-2.0
// Builds the console into static files (`make ui`): src/ bundled by esbuild
// with the npm packages of package-lock.json, nothing fetched at run time.
// Usage: node build.mjs OUTDIR
import { build } from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] || join(here, '..', 'build', 'ui'));
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: join(here, 'src', 'main.js') },
  bundle: true,
  format: 'esm',
  target: ['chrome110', 'firefox115', 'safari16'],
  minify: true,
  sourcemap: true,
  outdir: out,
  logLevel: 'warning',
  legalComments: 'linked',
});
copyFileSync(join(here, 'src', 'index.html'), join(out, 'index.html'));
copyFileSync(join(here, 'src', 'favicon.svg'), join(out, 'favicon.svg'));
console.log(`console built into ${out}`);
