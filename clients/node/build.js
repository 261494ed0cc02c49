// npm run build (and npm pack, through prepack): the ESM build in dist/esm
// and the CommonJS build in dist/cjs, each with its type declarations. The
// package is "type": "module", so dist/cjs gets a package.json of its own
// saying its .js files are CommonJS.
import { execFileSync } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

process.chdir(fileURLToPath(new URL('.', import.meta.url)));
const tsc = 'node_modules/typescript/bin/tsc';
rmSync('dist', { recursive: true, force: true });
for (const project of ['tsconfig.json', 'tsconfig.cjs.json']) {
  execFileSync(process.execPath, [tsc, '-p', project], { stdio: 'inherit' });
}
writeFileSync('dist/cjs/package.json', '{ "type": "commonjs" }\n');
