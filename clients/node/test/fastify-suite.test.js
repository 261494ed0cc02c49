// @fastify/rate-limit's own Redis tests (test/redis-rate-limit.test.js in its
// npm tarball, v11 and v10), run unchanged against createFastifyStore through
// test/support/fastify-suite-harness.cjs. Every case passes except those that
// cannot by design, listed in the package README; a case that starts passing
// or failing otherwise fails this test.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, it } from 'node:test';
import { startServer } from './support/redis.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The cases that count requests past the limit (ban > 0, continueExceeding, exponentialBackoff): the store refuses those options. */
const BY_DESIGN = [
  'Global rate limit > With redis store (ban)',
  'Global rate limit > When continue exceeding is on (Redis)',
  'Global rate limit > Redis with continueExceeding should not always return the timeWindow as ttl',
  'Global rate limit > With redis store and exponential backoff',
  'Route rate limit > When continue exceeding is on (Redis)',
  'Route rate limit > Route-specific exponential backoff with redis store',
];

let server;
before(async () => {
  server = await startServer();
});
after(() => server?.stop());

/** Runs the suite; resolves to { passed: [...], failed: [...] } by 'describe > test' name. */
function runSuite(pluginDir) {
  const args = [
    '--test', '--test-reporter=tap', '--test-force-exit',
    '--require', path.join(root, 'test/support/fastify-suite-harness.cjs'),
    path.join(pluginDir, 'test/redis-rate-limit.test.js'),
  ];
  // Without NODE_TEST_CONTEXT, which would make the inner runner report to this one instead of in TAP.
  const { NODE_TEST_CONTEXT: _, ...parentEnv } = process.env;
  const env = { ...parentEnv, THROTTLE_TEST_PORT: String(server.port), THROTTLE_PLUGIN_DIR: pluginDir };
  return new Promise((resolve) => {
    execFile(process.execPath, args, { cwd: root, env, timeout: 120_000 }, (_error, stdout, stderr) => {
      const passed = [];
      const failed = [];
      let suite = '';
      for (const line of stdout.split('\n')) {
        const top = /^# Subtest: (.*)$/.exec(line);
        if (top) suite = top[1];
        const result = /^ {4}(not )?ok \d+ - (.*)$/.exec(line);
        if (result) (result[1] ? failed : passed).push(`${suite} > ${result[2]}`);
      }
      resolve({ passed, failed, stdout: stdout + stderr });
    });
  });
}

for (const [version, dir] of [['11', 'node_modules/@fastify/rate-limit'], ['10', 'node_modules/@fastify/rate-limit-10']]) {
  it(`@fastify/rate-limit ${version}'s Redis suite: every case passes but those that cannot by design`, async (t) => {
    const { passed, failed, stdout } = await runSuite(path.join(root, dir));
    t.diagnostic(`@fastify/rate-limit ${version} redis-rate-limit.test.js: ${passed.length} passed, ${failed.length} failed (by design)`);
    assert.ok(passed.length >= 8, `the suite ran:\n${stdout}`);
    assert.deepEqual(failed.sort(), [...BY_DESIGN].sort(), stdout);
  });
}
