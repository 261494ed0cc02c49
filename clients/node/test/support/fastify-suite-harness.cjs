// The smallest harness that runs @fastify/rate-limit's own Redis tests
// (test/redis-rate-limit.test.js in its npm tarball) against
// createFastifyStore, preloaded with `node --require`:
// - the suite's ioredis clients connect to the test server on
//   THROTTLE_TEST_PORT (the suite assumes 127.0.0.1:6379);
// - the plugin, which the suite loads as `require('../index')` from
//   THROTTLE_PLUGIN_DIR, gets `store: createFastifyStore(redis, { prefix:
//   nameSpace })` in place of its `redis` and `nameSpace` options.
// Nothing else in the suite changes.
'use strict';

const path = require('node:path');
const { Redis } = require('ioredis');
const { createFastifyStore } = require('redis-throttle');

Redis.defaultOptions.port = Number(process.env.THROTTLE_TEST_PORT);

const pluginPath = require.resolve(path.resolve(process.env.THROTTLE_PLUGIN_DIR, 'index.js'));
const plugin = require(pluginPath);

function withThrottleStore(fastify, settings) {
  if (settings && settings.redis) {
    const { redis, nameSpace, ...rest } = settings;
    settings = { ...rest, store: createFastifyStore(redis, nameSpace === undefined ? {} : { prefix: nameSpace }) };
  }
  return plugin(fastify, settings);
}
// fastify-plugin's marks (skip-override, name, fastify version) and the exports beside it.
for (const symbol of Object.getOwnPropertySymbols(plugin)) withThrottleStore[symbol] = plugin[symbol];
Object.assign(withThrottleStore, plugin);
require.cache[pluginPath].exports = withThrottleStore;
