// Preloaded (mocha --require) by test/rlf-suite.test.js: rate-limiter-flexible's
// tests connect to 127.0.0.1:6379, the Redis of its own docker-compose; here
// that address is the test server on THROTTLE_TEST_PORT (never 6379 itself).
// Nothing in the suite changes.
'use strict';

const net = require('node:net');

const port = Number(process.env.THROTTLE_TEST_PORT);
const connect = net.createConnection;

function redirect(...args) {
  const [first] = args;
  if (first && typeof first === 'object' && Number(first.port) === 6379) {
    args[0] = { ...first, port, host: '127.0.0.1' };
  } else if (Number(first) === 6379 || first === '6379') {
    args[0] = port;
    if (typeof args[1] !== 'function') args[1] = '127.0.0.1';
  }
  return connect.apply(net, args);
}

net.createConnection = redirect;
net.connect = redirect;
