// The tarball from `npm pack`, installed into a fresh app with the
// frameworks from the registry: the package README's express (ESM) and
// fastify (CommonJS) examples run there as written, and its types check
// under `import` and `require`.
import assert from 'node:assert/strict';
import { execFile as execFileCb, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, it } from 'node:test';
import { eventually } from './support/http.js';
import { freePort, startServer } from './support/redis.js';

const execFile = promisify(execFileCb);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const npm = (args, cwd) => execFile('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], { cwd, timeout: 300_000 });

let server;
let dir;
let app;
let files;
before(async () => {
  server = await startServer();
  dir = mkdtempSync(path.join(tmpdir(), 'throttle-pack-'));
  const { stdout } = await npm(['pack', '--json', '--pack-destination', dir], root);
  const [packed] = JSON.parse(stdout.slice(stdout.indexOf('[')));
  files = packed.files.map((f) => f.path);
  app = path.join(dir, 'app');
  await execFile('mkdir', [app]);
  writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'fresh-app', private: true }));
  await npm(['install', '--prefer-offline', path.join(dir, packed.filename),
    'express@5', 'express-rate-limit@8', 'fastify@5', '@fastify/rate-limit@11', 'redis@6', 'ioredis@6', '@types/node@20'], app);
});
after(async () => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  await server?.stop();
});

it('the tarball holds the ESM and CommonJS builds with their types, and no sources', () => {
  for (const f of ['package.json', 'README.md', 'dist/esm/index.js', 'dist/esm/index.d.ts', 'dist/cjs/index.js', 'dist/cjs/index.d.ts', 'dist/cjs/package.json']) {
    assert.ok(files.includes(f), `${f} in ${files.join(', ')}`);
  }
  assert.deepEqual(files.filter((f) => !f.startsWith('dist/') && f !== 'package.json' && f !== 'README.md'), []);
  const manifest = JSON.parse(readFileSync(path.join(app, 'node_modules/redis-throttle/package.json'), 'utf8'));
  assert.equal(manifest.dependencies, undefined, 'no runtime dependency');
});

/** The package README's examples: each fenced block after `<!-- node-example: NAME -->`. */
function readmeExamples() {
  const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
  const examples = {};
  for (const m of readme.matchAll(/<!-- node-example: (\S+) -->\n```js\n([\s\S]*?)```/g)) examples[m[1]] = m[2];
  return examples;
}

for (const [name, keyPrefix] of [['express.mjs', 'throttle:express:'], ['fastify.cjs', 'throttle:fastify:']]) {
  it(`the package README's ${name} runs as written from the tarball: the limit, then 429`, async () => {
    const source = readmeExamples()[name];
    assert.ok(source, `README.md has the ${name} example`);
    writeFileSync(path.join(app, name), source);
    const port = await freePort();
    const child = spawn(process.execPath, [name], { cwd: app, env: { ...process.env, REDIS_URL: server.url, PORT: String(port) }, stdio: ['ignore', 'inherit', 'inherit'] });
    const exited = new Promise((resolve) => child.once('exit', resolve));
    try {
      const url = `http://127.0.0.1:${port}/`;
      // Requests until the first 429: the 200s before it are the limit the app announces.
      const first = await eventually(() => fetch(url).then(async (r) => (await r.text(), r), () => null), 10_000, `${name} listening`);
      assert.equal(first.status, 200);
      const limit = Number(first.headers.get('x-ratelimit-limit'));
      assert.ok(limit > 0);
      let admitted = 1;
      for (;;) {
        const r = await fetch(url);
        await r.text();
        if (r.status === 429) {
          assert.ok(Number(r.headers.get('retry-after')) > 0);
          break;
        }
        assert.equal(r.status, 200);
        admitted++;
        assert.ok(admitted <= limit, 'no more than the limit admitted');
      }
      assert.equal(admitted, limit);
      assert.equal(await server.command('TYPE', `${keyPrefix}127.0.0.1`), 'thr-fixed', 'the module keeps the count');
    } finally {
      child.kill();
      await exited;
    }
  });
}

it('the types check for import and require', async () => {
  writeFileSync(path.join(app, 'types.mts'), `
import { createClient } from 'redis';
import { Redis } from 'ioredis';
import { rateLimit, type Store } from 'express-rate-limit';
import Fastify from 'fastify';
import fastifyRateLimit from '@fastify/rate-limit';
import { Throttle, ExpressStore, createFastifyStore, NestStorage, ThrottleModuleMissingError, type ThrottleResult, type ThrottleInfo, type ThrottleAllResult } from 'redis-throttle';

const redis = createClient();
const io = new Redis();
const throttle = new Throttle(redis);
const result: Promise<ThrottleResult> = throttle.sliding('k', 10, '1s', { exact: true, cost: 2, block: 100 });
const info: Promise<ThrottleInfo | null> = new Throttle(io, { prefix: 'x:' }).info('k');
const all: Promise<ThrottleAllResult> = throttle.all([{ algorithm: 'token', key: 'k', limit: 1, period: 1000, burst: 2 }]);
const store: Store = new ExpressStore({ sendCommand: (...args: string[]) => redis.sendCommand(args) });
rateLimit({ store });
await Fastify().register(fastifyRateLimit, { store: createFastifyStore(io, { algorithm: 'sliding' }) });
const nest: { increment(key: string, ttl: number, limit: number, blockDuration: number, name: string): Promise<{ totalHits: number; timeToExpire: number; isBlocked: boolean; timeToBlockExpire: number }> } = new NestStorage(redis);
const missing: Error = new ThrottleModuleMissingError('THROTTLE.FIXED', new Error('ERR unknown command'));
// @ts-expect-error limit is a number
throttle.fixed('k', '10', '1s');
// @ts-expect-error no such algorithm
new ExpressStore({ client: redis, algorithm: 'gcra' });
export { result, info, all, nest, missing };
`);
  writeFileSync(path.join(app, 'types.cts'), `
import throttle = require('redis-throttle');
const t = new throttle.Throttle((args: string[], key: string) => Promise.resolve([1, 1, 0, 0, 1000]));
const r: Promise<throttle.ThrottleResult> = t.fixed('k', 1, '1s');
export = r;
`);
  const tsc = path.join(root, 'node_modules/typescript/bin/tsc');
  const args = ['--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--skipLibCheck', 'types.mts', 'types.cts'];
  await execFile(process.execPath, [tsc, ...args], { cwd: app }).catch((error) => assert.fail(`tsc: ${error.stdout}${error.stderr}`));
});
