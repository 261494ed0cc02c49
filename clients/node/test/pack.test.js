// The package README's way to the package, from a fresh clone of the
// repository's committed HEAD: the documented `cd clients/node && npm ci &&
// npm pack`, run as written at the clone's root, builds the tarball; `npm
// install` of it in a fresh app that has the frameworks from the registry;
// the package README's express (ESM) and fastify (CommonJS) examples run
// there as written, and the types check under `import` and `require`.
// Uncommitted changes are not in the clone: commit before relying on this
// test.
import assert from 'node:assert/strict';
import { execFile as execFileCb, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, it } from 'node:test';
import { eventually } from './support/http.js';
import { freePort, startServer } from './support/redis.js';

const execFile = promisify(execFileCb);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * The environment of a user's shell: without what `npm test` adds (npm_*
 * variables, this package's node_modules/.bin on PATH), so that the
 * documented commands run in the clone as they would for a user.
 */
const userEnv = Object.fromEntries(
  Object.entries(process.env)
    .filter(([name]) => !/^npm_/i.test(name) && name !== 'INIT_CWD' && name !== 'NODE_TEST_CONTEXT')
    .map(([name, value]) => [name, name === 'PATH' ? value.split(path.delimiter).filter((p) => !/node_modules[\\/]\.bin|node-gyp-bin/.test(p)).join(path.delimiter) : value]),
);
const run = (file, args, cwd) => execFile(file, args, { cwd, env: userEnv, timeout: 300_000, maxBuffer: 16 << 20 });
const npm = (args, cwd) => run('npm', [...args, '--no-audit', '--no-fund', '--loglevel=error'], cwd);

/** The documented command: the package README's `npm pack` line, and the tarball it names. */
function documented(readme) {
  const m = /From a checkout of this repository, at its root:\s+`([^`]*npm pack[^`]*)` builds `([^`]+\.tgz)`/.exec(readme);
  assert.ok(m, 'clients/node/README.md says how to build the tarball from a checkout');
  return { command: m[1], tarball: m[2] };
}

/** Every command in backquotes that runs `npm pack`, in every Markdown page of the clone but node_modules. */
function packCommandsIn(dir, found = []) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (entry.name === 'node_modules' || entry.name === '.git' || entry.name === 'target') continue;
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) packCommandsIn(file, found);
    else if (entry.name.endsWith('.md')) {
      for (const m of readFileSync(file, 'utf8').matchAll(/`([^`\n]*npm pack[^`\n]*)`/g)) found.push({ file: path.relative(checkout, file), command: m[1] });
    }
  }
  return found;
}

let server;
let dir;
let checkout;
let pack; // { command, tarball, stdout, stderr } of the documented command in the clone
let packWithoutCi; // the error of `npm pack` before `npm ci`
let app;
before(async () => {
  server = await startServer();
  dir = mkdtempSync(path.join(tmpdir(), 'throttle-pack-'));
  app = path.join(dir, 'app');
  mkdirSync(app);
  writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'fresh-app', private: true }));
  // The application and its frameworks, from the registry, while the clone builds the tarball.
  const frameworks = npm(['install', '--prefer-offline',
    'express@5', 'express-rate-limit@8', 'fastify@5', '@fastify/rate-limit@11', 'redis@6', 'ioredis@6', '@types/node@20'], app);
  const built = (async () => {
    const { stdout: top } = await run('git', ['rev-parse', '--show-toplevel'], root);
    const { stdout: head } = await run('git', ['rev-parse', 'HEAD'], root);
    checkout = path.join(dir, 'checkout');
    await run('git', ['clone', '--quiet', '--no-checkout', top.trim(), checkout], dir);
    await run('git', ['checkout', '--quiet', '--detach', head.trim()], checkout);
    // npm pack alone, as the README once said: it must fail, saying what to run.
    packWithoutCi = await npm(['pack'], path.join(checkout, 'clients/node')).then(() => null, (error) => error);
    pack = documented(readFileSync(path.join(checkout, 'clients/node/README.md'), 'utf8'));
    Object.assign(pack, await run('sh', ['-c', pack.command], checkout));
  })();
  // Both end before either's failure is reported, so that after() removes a directory nothing still writes to.
  for (const outcome of await Promise.allSettled([frameworks, built])) if (outcome.status === 'rejected') throw outcome.reason;
  // The README: `npm install /path/to/redis-throttle-0.1.0.tgz` in the application.
  await npm(['install', '--prefer-offline', path.join(checkout, 'clients/node', pack.tarball)], app);
});
after(async () => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  await server?.stop();
});

it('every page gives the same command, and npm pack alone says to run npm ci first', () => {
  const { command, tarball } = pack;
  assert.equal(command, 'cd clients/node && npm ci && npm pack');
  const version = JSON.parse(readFileSync(path.join(checkout, 'clients/node/package.json'), 'utf8')).version;
  assert.equal(tarball, `redis-throttle-${version}.tgz`, 'the README names the tarball of the package version');
  const others = packCommandsIn(checkout).filter((c) => c.command !== command && !/^npm pack\b/.test(c.command));
  assert.deepEqual(others, [], 'a page that says how to pack from a checkout gives the same command');
  assert.ok(packWithoutCi, 'npm pack before npm ci failed');
  assert.match(packWithoutCi.stderr, /the build needs TypeScript from the devDependencies, which are not installed: run `npm ci` in this directory first/);
});

it('the tarball holds the ESM and CommonJS builds with their types, and no sources', () => {
  const packed = path.join(checkout, 'clients/node', pack.tarball);
  assert.ok(existsSync(packed), `${pack.tarball} built:\n${pack.stdout}${pack.stderr}`);
  const installed = path.join(app, 'node_modules/redis-throttle');
  for (const f of ['package.json', 'README.md', 'dist/esm/index.js', 'dist/esm/index.d.ts', 'dist/cjs/index.js', 'dist/cjs/index.d.ts', 'dist/cjs/package.json']) {
    assert.ok(existsSync(path.join(installed, f)), `${f} in the installed package`);
  }
  for (const f of ['src', 'test', 'build.js', 'tsconfig.json', 'node_modules']) assert.ok(!existsSync(path.join(installed, f)), `no ${f} in the package`);
  const manifest = JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8'));
  assert.equal(manifest.dependencies, undefined, 'no runtime dependency');
});

/** The package README's examples: each fenced block after `<!-- node-example: NAME -->`. */
function readmeExamples() {
  const readme = readFileSync(path.join(checkout, 'clients/node/README.md'), 'utf8');
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
    let exitCode;
    const exited = new Promise((resolve) => child.once('exit', (code) => resolve((exitCode = code ?? 'signal'))));
    try {
      const url = `http://127.0.0.1:${port}/`;
      // Requests until the first 429: the 200s before it are the limit the app announces.
      const first = await eventually(() => {
        if (exitCode !== undefined) throw new Error(`${name} exited (${exitCode}) before listening`);
        return fetch(url).then(async (r) => (await r.text(), r), () => null);
      }, 60_000, `${name} listening`);
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

it('the types check for import and require; a wrong client does not compile', async () => {
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
// @ts-expect-error not a client
new Throttle({});
// @ts-expect-error rate-limit-redis 5's option, not supported
new ExpressStore({ client: redis, resetExpiryOnChange: true });
export { result, info, all, nest, missing };
`);
  writeFileSync(path.join(app, 'types.cts'), `
import throttle = require('redis-throttle');
const t = new throttle.Throttle((args: string[], key: string) => Promise.resolve([1, 1, 0, 0, 1000]));
const r: Promise<throttle.ThrottleResult> = t.fixed('k', 1, '1s');
export = r;
`);
  // The TypeScript the clone's npm ci installed (the package's own).
  const tsc = path.join(checkout, 'clients/node/node_modules/typescript/bin/tsc');
  const args = ['--noEmit', '--strict', '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--skipLibCheck', 'types.mts', 'types.cts'];
  await execFile(process.execPath, [tsc, ...args], { cwd: app }).catch((error) => assert.fail(`tsc: ${error.stdout}${error.stderr}`));
});
