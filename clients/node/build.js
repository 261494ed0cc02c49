// npm run build (and npm pack, through prepack): the ESM build in dist/esm
// and the CommonJS build in dist/cjs, each with its type declarations. The
// package is "type": "module", so dist/cjs gets a package.json of its own
// saying its .js files are CommonJS. It needs `npm ci` first.
import { execFileSync } from 'node:child_process';
import { existsSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

process.chdir(fileURLToPath(new URL('.', import.meta.url)));
const tsc = 'node_modules/typescript/bin/tsc';
if (!existsSync(tsc)) {
  // A fresh checkout has no node_modules: the build needs the TypeScript of
  // the devDependencies, which npm pack does not install by itself.
  console.error(
    'redis-throttle: the build needs TypeScript from the devDependencies, which are not installed: ' +
      'run `npm ci` in this directory first (from the repository root: `cd clients/node && npm ci && npm pack`)',
  );
  process.exit(1);
}
rmSync('dist', { recursive: true, force: true });
for (const project of ['tsconfig.json', 'tsconfig.cjs.json']) {
  execFileSync(process.execPath, [tsc, '-p', project], { stdio: 'inherit' });
}
writeFileSync('dist/cjs/package.json', '{ "type": "commonjs" }\n');
// src/peer.ts reads import.meta, which CommonJS has not: there, CommonJS's own require.
writeFileSync(
  'dist/cjs/peer.js',
  '"use strict";\n// CommonJS\'s own require, resolving from this package (build.js writes this file).\n' +
    'Object.defineProperty(exports, "__esModule", { value: true });\nexports.requirePeer = require;\n',
);
