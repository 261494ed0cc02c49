#!/usr/bin/env node
// The throttle module from Node.js with node-redis (package.json pins it;
// `npm ci` installs it): RESP3 map replies, a token-bucket middleware for
// node:http answering 429 with the IETF RateLimit fields, exercised over real
// HTTP, THROTTLE.INFO and an error. Time is driven with AT (the middleware
// takes a clock), so every value is exact.
//
//   (cd examples/node && npm ci) && REDIS_PORT=6399 node examples/node/example.js
'use strict';

const assert = require('node:assert/strict');
const http = require('node:http');
const { createClient } = require('redis');

let failures = 0;
function check(what, got, want) {
  try {
    assert.deepStrictEqual(got, want);
    console.log(`ok  ${what}: ${JSON.stringify(got)}`);
  } catch {
    console.log(`MISMATCH ${what}: ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
    failures += 1;
  }
}

// With RESP3 (HELLO 3) each reply is a map; node-redis gives a null-prototype object.
const plain = (o) => ({ ...o });

/**
 * Express/Connect-style middleware: `limit` requests per `periodSeconds` and
 * bursts of `burst` per client (THROTTLE.TOKEN), with the RateLimit-Policy
 * and RateLimit fields of draft-ietf-httpapi-ratelimit-headers-11 and
 * Retry-After on 429. `now()` returns Unix µs (AT); omit it for the server's clock.
 */
function rateLimit(redis, { limit, periodSeconds, burst = limit, keyOf, now }) {
  return async (req, res, next) => {
    const args = ['THROTTLE.TOKEN', `rl:${keyOf(req)}`, String(limit), `${periodSeconds}s`, 'BURST', String(burst)];
    if (now) args.push('AT', String(now()));
    const r = await redis.sendCommand(args);
    // t, the effective window: admitted, the seconds until the bucket is full
    // again; refused, the seconds until the request can succeed, which is
    // also Retry-After (section 6: Retry-After not before the window's end).
    const retry = Math.ceil(r.retry_after / 1000);
    const t = r.allowed ? Math.ceil(r.reset_after / 1000) : retry;
    res.setHeader('RateLimit-Policy', `"default";q=${limit};w=${periodSeconds}`);
    res.setHeader('RateLimit', `"default";r=${r.remaining};t=${t}`);
    if (r.allowed) return next();
    res.statusCode = 429;
    res.setHeader('Retry-After', String(retry));
    res.end('Too Many Requests\n');
  };
}

async function main() {
  const redis = await createClient({
    socket: { host: process.env.REDIS_HOST || '127.0.0.1', port: Number(process.env.REDIS_PORT || 6399) },
    RESP: 3,
  }).connect();
  const p = 'example:node:';
  await redis.del([`${p}carol`, `rl:${p}client`]);

  // The token bucket of docs/commands.md: 10 a second, bursts of 20.
  const token = (at, cost = 1) => redis
    .sendCommand(['THROTTLE.TOKEN', `${p}carol`, '10', '1s', 'BURST', '20', 'COST', String(cost), 'AT', String(at)])
    .then(plain);
  check('take the whole burst', await token(0, 20),
    { allowed: true, limit: 20, remaining: 0, retry_after: 0, reset_after: 2000 });
  check('50 ms later: limited', await token(50_000),
    { allowed: false, limit: 20, remaining: 0, retry_after: 50, reset_after: 1950 });
  check('100 ms later: a token', await token(100_000),
    { allowed: true, limit: 20, remaining: 0, retry_after: 0, reset_after: 2000 });
  check('THROTTLE.INFO', plain(await redis.sendCommand(['THROTTLE.INFO', `${p}carol`, 'AT', '1100000'])),
    { algorithm: 'token', limit: 10, period_ms: 1000, burst: 20, updated_at: 100_000, remaining: 10, reset_after: 1000 });

  // The middleware on a real HTTP server: 1 request a second, bursts of 3.
  let clock = 1_700_000_000_000_000;
  const limiter = rateLimit(redis, { limit: 1, periodSeconds: 1, burst: 3, keyOf: () => `${p}client`, now: () => clock });
  const server = http.createServer((req, res) => {
    limiter(req, res, () => res.end('hello\n')).catch((e) => { res.statusCode = 500; res.end(`${e}\n`); });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${server.address().port}/`;
  const get = async () => {
    const r = await fetch(url);
    await r.text();
    return [r.status, r.headers.get('ratelimit'), r.headers.get('retry-after')];
  };
  const burst = [];
  for (let i = 0; i < 4; i++) burst.push(await get());
  check('burst of 3, then 429', burst, [
    [200, '"default";r=2;t=1', null],
    [200, '"default";r=1;t=2', null],
    [200, '"default";r=0;t=3', null],
    [429, '"default";r=0;t=1', '1'],
  ]);
  clock += 1_000_000;
  check('a second later: one token back', await get(), [200, '"default";r=0;t=3', null]);
  server.close();

  // Bad input is an error reply; being limited is not.
  try {
    await redis.sendCommand(['THROTTLE.TOKEN', `${p}carol`, '10', '1s', 'BURST', '0']);
    check('BURST 0', 'no error', 'an error');
  } catch (e) {
    check('BURST 0', e.message, 'ERR invalid BURST: expected an integer from 1 to 1000000000000000');
  }

  await redis.del([`${p}carol`, `rl:${p}client`]);
  await redis.quit();
  if (failures) {
    console.log(`node example: ${failures} mismatches`);
    process.exitCode = 1;
  } else {
    console.log('node example: every reply as expected');
  }
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
