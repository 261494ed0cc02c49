// @fastify/rate-limit's own Redis tests (test/redis-rate-limit.test.js in its
// npm tarball, v11 and v10), run unchanged against createFastifyStore through
// test/support/fastify-suite-harness.cjs. Every case passes, none skipped:
// ban, continueExceeding and exponentialBackoff included.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, it } from 'node:test';
import { startServer } from './support/redis.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

let server;
before(async () => {
  server = await startServer();
});
after(() => server?.stop());

/** Runs the suite; resolves to { passed, failed, skipped } ('describe > test' names; a skipped or todo case is neither passed nor failed). */
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
      const skipped = [];
      let suite = '';
      for (const line of stdout.split('\n')) {
        const top = /^# Subtest: (.*)$/.exec(line);
        if (top) suite = top[1];
        const result = /^ {4}(not )?ok \d+ - (.*?)( # (SKIP|TODO)\b.*)?$/i.exec(line);
        if (result) (result[3] ? skipped : result[1] ? failed : passed).push(`${suite} > ${result[2]}`);
      }
      resolve({ passed, failed, skipped, stdout: stdout + stderr });
    });
  });
}

for (const [version, dir] of [['11', 'node_modules/@fastify/rate-limit'], ['10', 'node_modules/@fastify/rate-limit-10']]) {
  it(`@fastify/rate-limit ${version}'s Redis suite: every case passes`, async (t) => {
    const { passed, failed, skipped, stdout } = await runSuite(path.join(root, dir));
    t.diagnostic(`@fastify/rate-limit ${version} redis-rate-limit.test.js: ${passed.length} passed, ${failed.length} failed, ${skipped.length} skipped`);
    assert.ok(passed.length >= 14, `the suite ran:\n${stdout}`);
    assert.deepEqual(failed, [], stdout);
    assert.deepEqual(skipped, [], stdout);
  });
}
