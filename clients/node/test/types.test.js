// The type declarations, compiled with the package's own TypeScript against
// the built package: every supported client is accepted where a client is
// taken, and wrong arguments (a client that is none, options no store or
// method takes) are compile errors, each on its line.
import assert from 'node:assert/strict';
import { execFile as execFileCb } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { it } from 'node:test';

const execFile = promisify(execFileCb);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** tsc on one file (strict, nodenext, as an application compiles); resolves to { code, output }. */
async function tsc(file) {
  const args = [
    path.join(root, 'node_modules/typescript/bin/tsc'), '--ignoreConfig', '--noEmit', '--pretty', 'false',
    '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--skipLibCheck', '--types', 'node',
    file,
  ];
  try {
    const { stdout, stderr } = await execFile(process.execPath, args, { cwd: root });
    return { code: 0, output: stdout + stderr };
  } catch (error) {
    if (typeof error.code !== 'number') throw error;
    return { code: error.code, output: `${error.stdout}${error.stderr}` };
  }
}

it('every supported client and cluster type-checks as a client (node-redis 4, 5, 6, ioredis 5, 6)', async () => {
  const { code, output } = await tsc('test/types/accepted.ts');
  assert.equal(code, 0, output);
});

it('wrong arguments do not compile: new Throttle({}), a client that is none, options nothing takes', async () => {
  const file = 'test/types/refused.ts';
  const source = readFileSync(path.join(root, file), 'utf8').split('\n');
  const marked = source.flatMap((line, i) => (line.endsWith('// refused') ? [i + 1] : []));
  assert.ok(marked.length >= 10, 'the file marks its wrong lines');
  assert.ok(source[marked[0] - 1].startsWith('new Throttle({});'), 'the first is new Throttle({})');
  const { code, output } = await tsc(file);
  assert.notEqual(code, 0, `tsc accepted ${file}:\n${output}`);
  const errorLines = [...output.matchAll(/^test\/types\/refused\.ts\((\d+),\d+\): error TS\d+:/gm)].map((m) => Number(m[1]));
  assert.deepEqual([...new Set(errorLines)].sort((a, b) => a - b), marked, output);
});
