// npm test: the suite on every server named in THROTTLE_SERVERS
// (space-separated server binaries; make test-node names Redis 7.0, Redis
// 8.2, Valkey 8.1 and Valkey 9.1), else on THROTTLE_REDIS_SERVER, else on
// the redis-server on PATH. Each run is one `node --test` with
// THROTTLE_REDIS_SERVER set to its server:
//
// - on every server: the client on every client and protocol, the cluster,
//   and the three stores called as their frameworks call them; leases and
//   the Semaphore;
// - on the first server only: the frameworks over real HTTP and the
//   @fastify/rate-limit suite (THROTTLE_HTTP_EVERY_SERVER=1: on every
//   server). Their HTTP half does not depend on the server, their store
//   half is what stores.test.js checks everywhere, and four times over they
//   would take most of make test-node's time on a two-core machine;
// - once, on the first server: the type checks and the tarball built from
//   a fresh clone, which do not depend on the server.
//
// The runs go at the same time (their time is mostly spent waiting on
// servers, HTTP and npm); each report is printed whole when its run ends,
// then one line per run.
//
//   node test/run.js                      every file
//   node test/run.js test/nest.test.js    some files (each where it belongs)
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Test files that exercise a server: run on every server. */
const EVERY_SERVER = ['client', 'cluster', 'stores', 'lease', 'semaphore'].map((name) => `test/${name}.test.js`);
/** The frameworks over real HTTP: on the first server (every server with THROTTLE_HTTP_EVERY_SERVER=1). */
const HTTP = ['express', 'fastify', 'nest', 'fastify-suite'].map((name) => `test/${name}.test.js`);
/** Test files whose outcome does not depend on the server: run once. */
const ONCE = ['types', 'pack'].map((name) => `test/${name}.test.js`);
const ALL = [...EVERY_SERVER, ...HTTP, ...ONCE];
const httpEverywhere = process.env.THROTTLE_HTTP_EVERY_SERVER === '1';

const servers = (process.env.THROTTLE_SERVERS ?? '').split(/\s+/).filter(Boolean);
if (servers.length === 0) servers.push(process.env.THROTTLE_REDIS_SERVER || 'redis-server');

const asked = process.argv.slice(2).map((f) => path.relative(root, path.resolve(f)).split(path.sep).join('/'));
for (const file of asked) {
  if (!ALL.includes(file)) {
    console.error(`test/run.js: ${file} is not one of the test files: ${ALL.join(', ')}`);
    process.exit(2);
  }
}
const pick = (files) => (asked.length === 0 ? files : files.filter((f) => asked.includes(f)));

/** "Redis 7.0.15", "Valkey 9.1.2": what the binary says it is, or why it cannot run. */
function describeServer(binary) {
  const r = spawnSync(binary, ['--version'], { encoding: 'utf8' });
  if (r.error) {
    console.error(`test/run.js: cannot run the server ${binary} (${r.error.code ?? r.error.message}); make servers fetches the servers make test-node names`);
    process.exit(2);
  }
  const m = /^(\w+) server v=(\S+)/.exec(r.stdout);
  return m ? `${m[1]} ${m[2]}` : binary;
}

const runs = [];
const add = (label, binary, files) => files.length > 0 && runs.push({ label, binary, files });
for (const [i, binary] of servers.entries()) {
  const name = `${describeServer(binary)} (${binary})`;
  add(name, binary, pick(EVERY_SERVER));
  if (i === 0 || httpEverywhere) add(`${name}, HTTP`, binary, pick(HTTP));
}
add(`${describeServer(servers[0])}, once`, servers[0], pick(ONCE));
if (runs.length === 0) {
  console.error('test/run.js: no test file to run');
  process.exit(2);
}

// A reader that goes away (`| head`) must not stop the runs half-way: they
// finish and stop their servers either way.
process.stdout.on('error', () => {});
const children = new Set();
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    for (const child of children) child.kill(signal);
    process.exitCode = 1;
  });
}

/** One `node --test` run; resolves to { code, output, counts, seconds }. */
function runTests({ binary, files }) {
  const started = process.hrtime.bigint();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--test', '--test-reporter=spec', ...files], {
      cwd: root,
      env: { ...process.env, THROTTLE_REDIS_SERVER: binary },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.add(child);
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('close', (code, signal) => {
      children.delete(child);
      const count = (name) => Number(new RegExp(`^ℹ ${name} (\\d+)$`, 'm').exec(output)?.[1] ?? NaN);
      resolve({
        code: code ?? signal,
        output,
        counts: { tests: count('tests'), pass: count('pass'), fail: count('fail'), skipped: count('skipped') },
        seconds: Number(process.hrtime.bigint() - started) / 1e9,
      });
    });
  });
}

console.log(`running ${runs.length} test runs at once:`);
for (const run of runs) console.log(`  ${run.label}: ${run.files.map((f) => path.basename(f, '.test.js')).join(', ')}`);
const results = await Promise.all(
  runs.map(async (run) => {
    const result = await runTests(run);
    console.log(`\n===== ${run.label}: exit ${result.code}, ${result.seconds.toFixed(1)} s =====\n${result.output}`);
    return { ...run, ...result };
  }),
);

console.log('\nsummary:');
for (const r of results) {
  const { tests, pass, fail } = r.counts;
  console.log(`  ${r.code === 0 ? 'ok  ' : 'FAIL'} ${r.label}: ${tests} tests, ${pass} pass, ${fail} fail, ${r.seconds.toFixed(1)} s (${r.files.length} files)`);
}
process.exit(process.exitCode || (results.every((r) => r.code === 0) ? 0 : 1));
