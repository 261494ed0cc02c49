// redis-semaphore's own tests, from its repository, run against this
// package's Semaphore on a real server with the module: the tests are the
// repository's, unchanged; only the modules they test are swapped for this
// package's (the Semaphore, its Lock and errors; redis-semaphore's semaphore
// functions for the lease commands they stand for), and its docker-compose
// helpers for stopping and starting this test's server. Every test passes
// except those listed below, with the reason (clients/node/README.md lists
// them too); a test that starts passing or failing otherwise fails this one.
//
// The npm package ships no tests: give a checkout of the repository at the
// tag of the npm release in THROTTLE_SEMAPHORE_REPO (make
// test-node-semaphore). The suite's own devDependencies (mocha, chai, sinon,
// swc, ioredis 6.0.0, ...) are pinned in test/redis-semaphore/package.json
// and installed there on first use.
import assert from 'node:assert/strict';
import { execFile as execFileCb, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, it } from 'node:test';
import { MODULE, startServer } from './support/redis.js';

const execFile = promisify(execFileCb);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const deps = path.join(root, 'test/redis-semaphore');
const repo = process.env.THROTTLE_SEMAPHORE_REPO;

/** The test files run: the Semaphore's, the shared Lock's, and the semaphore functions'. */
const FILES = [
  'test/init.test.ts',
  'test/src/Lock.test.ts',
  'test/src/RedisSemaphore.test.ts',
  'test/src/semaphore/acquire/index.test.ts',
  'test/src/semaphore/acquire/internal.test.ts',
  'test/src/semaphore/refresh/index.test.ts',
  'test/src/semaphore/release.test.ts',
];

const SORTED_SET = "reads or writes redis-semaphore's sorted set (ZRANGE, ZCARD, ZADD) at the key, which is a lease key here (WRONGTYPE)";

/** The tests that cannot pass, by mocha's full title, and why. */
export const CANNOT_PASS = {
  'Semaphore should acquire and release semaphore': SORTED_SET,
  'Semaphore should refresh lock every refreshInterval ms until release': SORTED_SET,
  'Semaphore should stop refreshing lock if stopped': SORTED_SET,
  'Semaphore should acquire maximum LIMIT semaphores': SORTED_SET,
  'Semaphore should support externally acquired semaphore (deprecated interface)': SORTED_SET,
  'Semaphore should support externally acquired semaphore': SORTED_SET,
  'Semaphore [Node shutdown] should lost lock when node become alive': `${SORTED_SET} (the loss itself is found, and a new holder gets the slot)`,
  'Semaphore ioredis-mock support should acquire and release semaphore':
    'ioredis-mock imitates ioredis in memory: it has no modules, so no THROTTLE commands, nor the call() this package sends them with (with ioredis 6 the test fails for redis-semaphore itself too)',
  'semaphore refresh should return false if resource is already acquired': SORTED_SET,
  'semaphore refresh should return false if resource is already acquired, but some expired': SORTED_SET,
  'semaphore refresh should return true for success refresh': SORTED_SET,
  'semaphore release should remove key after success release': SORTED_SET,
};

// The modules the tests import, swapped for this package's. Each is
// TypeScript that the suite's swc compiles like the rest.
const dist = (file) => JSON.stringify(path.join(root, 'dist/cjs', file));
const SHIMS = {
  'src/RedisSemaphore.ts': `import { Semaphore } from ${dist('index.js')}\nexport default Semaphore\n`,
  'src/Lock.ts': `export { Lock } from ${dist('semaphore.js')}\n`,
  'src/errors/LostLockError.ts': `import { LostLockError } from ${dist('index.js')}\nexport default LostLockError\n`,
  'src/errors/TimeoutError.ts': `import { TimeoutError } from ${dist('index.js')}\nexport default TimeoutError\n`,
  // redis-semaphore's semaphore functions, as the lease commands: acquire
  // waits on the server (isolated, as the Semaphore does) instead of polling.
  'src/semaphore/acquire/index.ts': `import { Throttle } from ${dist('index.js')}
export interface Options { identifier: string; lockTimeout: number; acquireTimeout: number; acquireAttemptsLimit: number; retryInterval: number }
export async function acquireSemaphore(client: any, key: string, limit: number, options: Options, abortSignal?: AbortSignal): Promise<boolean> {
  const { identifier, lockTimeout, acquireTimeout, acquireAttemptsLimit } = options
  const waits = acquireAttemptsLimit > 1 && acquireTimeout > 0
  const block = !waits ? undefined : acquireTimeout === Number.POSITIVE_INFINITY ? 0 : acquireTimeout
  const got = await new Throttle(client).acquire(key, limit, lockTimeout, { id: identifier, block, isolated: block !== undefined, signal: block !== undefined ? abortSignal : undefined })
  return got.allowed
}
`,
  'src/semaphore/acquire/lua.ts': `import { Throttle } from ${dist('index.js')}
// The script's arguments: the lease command at the caller's clock (AT).
export async function acquireLua(client: any, [key, limit, identifier, lockTimeout, now]: [string, number, string, number, number]): Promise<0 | 1> {
  const got = await new Throttle(client).acquire(key, limit, lockTimeout, { id: identifier, at: BigInt(now) * 1000n })
  return got.allowed ? 1 : 0
}
`,
  'src/semaphore/refresh/index.ts': `import { Throttle } from ${dist('index.js')}
export interface Options { identifier: string; lockTimeout: number }
export async function refreshSemaphore(client: any, key: string, _limit: number, options: Options): Promise<boolean> {
  return await new Throttle(client).renew(key, options.identifier, options.lockTimeout)
}
`,
  'src/semaphore/release.ts': `import { Throttle } from ${dist('index.js')}
export async function releaseSemaphore(client: any, key: string, identifier: string): Promise<void> {
  await new Throttle(client).release(key, identifier)
}
`,
  // docker compose stop/up of the suite's server: asks this test, over the
  // IPC channel it opens to mocha, to stop its server (SHUTDOWN NOSAVE) and
  // start one again on the same port (its data gone, as in the suite's
  // containers), which this test then owns and stops by its handle.
  'test/shell.ts': `process.channel?.unref() // mocha still ends when its tests do
function ask(what: 'down' | 'up'): Promise<void> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: any) => {
      if (message?.done !== what) return
      process.off('message', onMessage)
      process.channel?.unref()
      if (message.error) reject(new Error(message.error))
      else resolve()
    }
    process.on('message', onMessage)
    process.channel?.ref()
    process.send!({ ask: what })
  })
}
export async function downRedisServer(_num: number) {
  await ask('down')
}
export async function upRedisServer(_num: number) {
  await ask('up')
}
`,
};

let server;
let restarted; // the server started again by the suite's upRedisServer: { child, exit }
let work;

/** Whether a server answers PING on the test server's port. */
function answers() {
  return new Promise((resolve) => {
    const socket = net.connect({ port: server.port, host: '127.0.0.1' });
    let data = '';
    const done = (ok) => {
      socket.destroy();
      resolve(ok);
    };
    socket.on('error', () => done(false));
    socket.on('connect', () => socket.write('*1\r\n$4\r\nPING\r\n'));
    socket.on('data', (chunk) => {
      data += chunk;
      if (data.includes('\r\n')) done(data.startsWith('+PONG'));
    });
  });
}
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The suite's downRedisServer: SHUTDOWN NOSAVE on the port, then waits until nothing answers there. */
async function stopServer() {
  await new Promise((resolve) => {
    const socket = net.connect({ port: server.port, host: '127.0.0.1' }, () => socket.write('*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n'));
    socket.on('error', resolve);
    socket.on('close', resolve);
  });
  if (restarted) await restarted.exit;
  while (await answers()) await pause(20);
}

/** The suite's upRedisServer: a server with the module on the same port again, unless one answers there. */
async function restartServer() {
  if (await answers()) return;
  const args = ['--port', String(server.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', server.dir, '--loadmodule', MODULE];
  const child = spawn(process.env.THROTTLE_REDIS_SERVER || 'redis-server', args, { stdio: 'ignore' });
  restarted = { child, exit: new Promise((resolve) => child.once('exit', resolve)) };
  const deadline = Date.now() + 30_000; // a guard, not a measure of speed
  while (!(await answers())) {
    if (Date.now() > deadline) throw new Error('the server did not start again');
    await pause(20);
  }
}
process.once('exit', () => restarted?.child.kill('SIGKILL'));

let version; // of the checkout
before(async () => {
  assert.ok(repo, 'THROTTLE_SEMAPHORE_REPO must name a checkout of redis-semaphore at the npm release\'s tag (make test-node-semaphore SEMAPHORE_REPO=dir)');
  assert.ok(existsSync(path.join(repo, 'test/src/RedisSemaphore.test.ts')), `${repo} is not a checkout of redis-semaphore's repository (no test/src/RedisSemaphore.test.ts)`);
  version = JSON.parse(readFileSync(path.join(repo, 'package.json'), 'utf8')).version;
  work = mkdtempSync(path.join(tmpdir(), 'throttle-redis-semaphore-'));
  const clone = path.join(work, 'redis-semaphore');
  cpSync(repo, clone, { recursive: true, filter: (file) => !/[\\/](node_modules|\.git)$/.test(file) });
  // The suite's devDependencies, installed once (again when the lock changes).
  const installed = path.join(deps, 'node_modules/.package-lock.json');
  if (!existsSync(installed) || statSync(installed).mtimeMs < statSync(path.join(deps, 'package-lock.json')).mtimeMs) {
    await execFile('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: deps, timeout: 600_000 });
  }
  symlinkSync(path.join(deps, 'node_modules'), path.join(clone, 'node_modules'), 'dir');
  for (const [file, text] of Object.entries(SHIMS)) writeFileSync(path.join(clone, file), text);
  server = await startServer();
});
after(async () => {
  // SHUTDOWN NOSAVE on the port stops whichever server answers there.
  await server?.stop();
  if (restarted) {
    restarted.child.kill('SIGKILL'); // gone already, unless SHUTDOWN did not reach it
    await restarted.exit;
  }
  if (work) rmSync(work, { recursive: true, force: true });
});

it("redis-semaphore's own tests against this package's Semaphore: every one passes but those that cannot", async (t) => {
  const dir = path.join(work, 'redis-semaphore');
  // Without NODE_TEST_CONTEXT, which would make a node:test inside report to this runner.
  const { NODE_TEST_CONTEXT: _, ...parentEnv } = process.env;
  const env = {
    ...parentEnv,
    REDIS_URI1: server.url,
    REDIS_URI2: server.url,
    REDIS_URI3: server.url,
  };
  const mocha = path.join(deps, 'node_modules/mocha/bin/mocha.js');
  let runs = 0;
  /** One mocha run of FILES (`more`: further options); resolves to its JSON report and output. */
  const run = (more) => {
    const report = path.join(work, `report-${runs++}.json`);
    return new Promise((resolve) => {
      const child = spawn(process.execPath, [mocha, '--reporter', 'json', '--reporter-option', `output=${report}`, ...more, ...FILES], {
        cwd: dir,
        env,
        stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
      });
      child.on('message', (message) => {
        const what = message?.ask;
        (what === 'down' ? stopServer() : what === 'up' ? restartServer() : Promise.reject(new Error(`unknown request ${what}`))).then(
          () => child.send({ done: what }),
          (error) => child.send({ done: what, error: String(error) }),
        );
      });
      // A guard against a run that never ends, not a measure of speed.
      const guard = setTimeout(() => child.kill('SIGKILL'), 300_000);
      child.on('close', () => clearTimeout(guard));
      let output = '';
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
      child.on('close', () => resolve({ output, report: existsSync(report) ? JSON.parse(readFileSync(report, 'utf8')) : null }));
    });
  };
  // Each test runs in a mocha process of its own: a test that fails half-way
  // leaves its semaphores refreshing, and their loss (the next test's
  // FLUSHDB) would be thrown into whichever test runs next.
  const listed = await run(['--dry-run']);
  assert.ok(listed.report, `mocha listed no tests:\n${listed.output}`);
  const titles = listed.report.tests.map((test) => test.fullTitle);
  const passed = [];
  const failures = [];
  const pending = [];
  for (const title of titles) {
    const grep = `^${title.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`;
    const { output, report } = await run(['--grep', grep]);
    assert.ok(report, `mocha wrote no report for ${title}:\n${output}`);
    assert.equal(report.stats.tests, 1, `one test ran for ${title}:\n${output}`);
    passed.push(...report.passes.map((test) => test.fullTitle));
    pending.push(...report.pending.map((test) => test.fullTitle));
    failures.push(...report.failures.map((f) => ({ title, message: String(f.err?.message).split('\n')[0], hook: f.fullTitle !== title ? f.fullTitle : undefined, output })));
  }
  const failed = [...new Set(failures.map((f) => f.title))];
  const details = failures.map((f) => `- ${f.title}${f.hook ? ` (${f.hook})` : ''}: ${f.message}`).join('\n');
  t.diagnostic(`redis-semaphore ${version}: ${titles.length} tests, ${passed.length} passed, ${failed.length} cannot pass, ${pending.length} pending`);
  for (const f of failures) t.diagnostic(`cannot pass: ${f.title}${f.hook ? ` (${f.hook})` : ''}: ${f.message}`);
  assert.equal(pending.length, 0, 'no test is skipped');
  assert.equal(passed.length + failed.length, titles.length, details);
  assert.deepEqual(failed.sort(), Object.keys(CANNOT_PASS).sort(), details);
});
