// ExpressStore under express 5 with express-rate-limit 8 (and 7), over real
// HTTP, against a real server with the module: status codes, every header,
// the window resetting, refunds, a concurrent flood, the absent module.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import express from 'express';
import rateLimit8 from 'express-rate-limit';
import rateLimit7 from 'express-rate-limit-7';
import { createClient } from 'redis';
import { ExpressStore } from 'redis-throttle';
import { flood, listen, request } from './support/http.js';
import { serverWithClients, startServer } from './support/redis.js';

/** The stores' clock: Unix µs sent as AT, so every window and reset is exact. A test moves it with `time.now`. */
const T0 = 1_700_000_000_000_000;
const fixedClock = () => {
  const time = { now: T0, clock: () => time.now };
  return time;
};

let server;
let nodeRedis;
let ioredis;
serverWithClients((started) => ({ server, nodeRedis, ioredis } = started));

/** An express app with /ok (200) and /fail (500) behind `limiter`; errors are answered with their message. */
function app(limiter) {
  const a = express();
  a.get('/ok', limiter, (_req, res) => res.send('ok'));
  a.get('/fail', limiter, (_req, res) => res.status(500).send('failed'));
  a.use((error, _req, res, _next) => res.status(500).send(`error: ${error.message}`));
  return a;
}

/**
 * A store whose refunds the test can wait for: the real store, counting
 * finished decrements (express-rate-limit asks for them after the response).
 */
class ObservedStore extends ExpressStore {
  decrements = 0;
  #waiting = [];
  async decrement(key) {
    await super.decrement(key);
    this.decrements++;
    for (const w of this.#waiting.filter((w) => this.decrements >= w.count)) w.resolve();
  }
  /** Resolves once `count` refunds have finished. */
  refunds(count) {
    return this.decrements >= count ? Promise.resolve() : new Promise((resolve) => this.#waiting.push({ count, resolve }));
  }
}

const versions = { 'express-rate-limit 8': rateLimit8, 'express-rate-limit 7': rateLimit7 };
const senders = {
  'node-redis sendCommand': () => ({ sendCommand: (...args) => nodeRedis.sendCommand(args) }),
  'ioredis call': () => ({ sendCommand: (command, ...args) => ioredis.call(command, ...args) }),
};

for (const [version, rateLimit] of Object.entries(versions)) {
  for (const [senderName, sender] of Object.entries(senders)) {
    describe(`${version}, ${senderName}`, () => {
      let n = 0;
      /** A fresh limiter (own prefix, clock fixed at T0) served on its own port. */
      async function serve(options, store = new ExpressStore({ ...sender(), prefix: `${version}:${senderName}:${n++}:`, clock: () => T0 })) {
        const limiter = rateLimit({ keyGenerator: (req) => req.get('x-client') ?? 'anon', store, ...options });
        const http = await listen(app(limiter));
        return { ...http, limiter, store };
      }

      it('admits the limit, then 429 with every header (legacy and draft-6)', async (t) => {
        const s = await serve({ windowMs: 60_000, limit: 3, standardHeaders: 'draft-6', legacyHeaders: true });
        t.after(s.close);
        const before = Date.now();
        const seen = [];
        for (let i = 0; i < 4; i++) seen.push(await request(`${s.url}/ok`));
        const after = Date.now();
        assert.deepEqual(seen.map((r) => r.status), [200, 200, 200, 429]);
        assert.deepEqual(seen.map((r) => r.headers['x-ratelimit-remaining']), ['2', '1', '0', '0']);
        assert.deepEqual(seen.map((r) => r.headers['ratelimit-remaining']), ['2', '1', '0', '0']);
        for (const r of seen) {
          assert.equal(r.headers['x-ratelimit-limit'], '3');
          assert.equal(r.headers['ratelimit-limit'], '3');
          assert.equal(r.headers['ratelimit-policy'], '3;w=60');
          // every request at T0: the window ends 60 s after it, for each of them
          assert.equal(r.headers['ratelimit-reset'], '60');
          // X-RateLimit-Reset is Unix seconds: 60 s after the reply came, within the requests' own span
          const reset = Number(r.headers['x-ratelimit-reset']);
          assert.ok(reset >= Math.ceil((before + 60_000) / 1000) && reset <= Math.ceil((after + 60_000) / 1000), `X-RateLimit-Reset ${reset}, requests from ${before} to ${after} ms`);
        }
        assert.equal(seen[0].headers['retry-after'], undefined);
        assert.equal(seen[3].headers['retry-after'], '60');
        assert.equal(seen[3].body, 'Too many requests, please try again later.');
        // other clients have their own count
        assert.equal((await request(`${s.url}/ok`, { 'x-client': 'other' })).status, 200);
      });

      it('draft-7 and draft-8 headers', async (t) => {
        const s7 = await serve({ windowMs: 60_000, limit: 2, standardHeaders: 'draft-7', legacyHeaders: false });
        t.after(s7.close);
        const a = await request(`${s7.url}/ok`);
        assert.equal(a.headers['ratelimit-policy'], '2;w=60');
        assert.equal(a.headers.ratelimit, 'limit=2, remaining=1, reset=60');
        assert.equal(a.headers['x-ratelimit-limit'], undefined);
        await request(`${s7.url}/ok`);
        const refused = await request(`${s7.url}/ok`);
        assert.equal(refused.status, 429);
        assert.equal(refused.headers.ratelimit, 'limit=2, remaining=0, reset=60');
        assert.equal(refused.headers['retry-after'], '60');
        if (version === 'express-rate-limit 8') {
          const s8 = await serve({ windowMs: 60_000, limit: 2, standardHeaders: 'draft-8', legacyHeaders: false, identifier: 'api' });
          t.after(s8.close);
          const b = await request(`${s8.url}/ok`);
          assert.equal(b.headers.ratelimit, '"api"; r=1; t=60');
          assert.match(b.headers['ratelimit-policy'], /^"api"; q=2; w=60; pk=:[A-Za-z0-9+/=]+:$/);
        }
      });

      it('the window resets: refused until Retry-After has passed, then a new window', async (t) => {
        const time = fixedClock();
        const store = new ExpressStore({ ...sender(), prefix: `${version}:${senderName}:resets:`, clock: time.clock });
        const s = await serve({ windowMs: 60_000, limit: 2 }, store);
        t.after(s.close);
        assert.deepEqual([(await request(`${s.url}/ok`)).status, (await request(`${s.url}/ok`)).status], [200, 200]);
        time.now = T0 + 30_000_000;
        const refused = await request(`${s.url}/ok`);
        assert.equal(refused.status, 429);
        assert.equal(refused.headers['retry-after'], '30');
        time.now = T0 + 59_999_000;
        assert.equal((await request(`${s.url}/ok`)).status, 429, 'still inside the window 1 ms before its end');
        time.now = T0 + 60_000_000;
        const again = await request(`${s.url}/ok`);
        assert.equal(again.status, 200, 'admitted once Retry-After has passed');
        assert.equal(again.headers['x-ratelimit-remaining'], '1', 'a new window with one request in it');
      });

      it('skipFailedRequests: failed requests are refunded, refused ones take nothing and get nothing back', async (t) => {
        const store = new ObservedStore({ ...sender(), prefix: `${version}:${senderName}:skip-failed:`, clock: () => T0 });
        const s = await serve({ windowMs: 60_000, limit: 2, skipFailedRequests: true }, store);
        t.after(s.close);
        for (let i = 0; i < 5; i++) assert.equal((await request(`${s.url}/fail`)).status, 500);
        await store.refunds(5);
        assert.equal(await s.limiter.getKey('anon'), undefined, 'every failed request was refunded');
        assert.equal((await request(`${s.url}/ok`)).status, 200);
        assert.equal((await request(`${s.url}/ok`)).status, 200);
        assert.equal((await request(`${s.url}/ok`)).status, 429);
        // The 429 is a failed request too: express-rate-limit asks for its refund.
        await store.refunds(6);
        assert.equal((await s.limiter.getKey('anon')).totalHits, 2);
        assert.equal((await request(`${s.url}/ok`)).status, 429, 'the refused request was not paid out');
      });

      it('skipSuccessfulRequests: only failures count', async (t) => {
        const store = new ObservedStore({ ...sender(), prefix: `${version}:${senderName}:skip-ok:`, clock: () => T0 });
        const s = await serve({ windowMs: 60_000, limit: 2, skipSuccessfulRequests: true }, store);
        t.after(s.close);
        for (let i = 0; i < 4; i++) assert.equal((await request(`${s.url}/ok`)).status, 200);
        await store.refunds(4);
        assert.equal((await request(`${s.url}/fail`)).status, 500);
        assert.equal((await request(`${s.url}/fail`)).status, 500);
        assert.equal((await request(`${s.url}/fail`)).status, 429);
        assert.equal((await request(`${s.url}/ok`)).status, 429);
      });

      it('getKey and resetKey', async (t) => {
        const s = await serve({ windowMs: 60_000, limit: 2 });
        t.after(s.close);
        assert.equal(await s.limiter.getKey('anon'), undefined);
        await request(`${s.url}/ok`);
        const before = Date.now();
        const info = await s.limiter.getKey('anon');
        const after = Date.now();
        assert.equal(info.totalHits, 1);
        // the window opened at T0 and the peek is at T0: 60 s left, counted from the reply
        const reset = info.resetTime.getTime();
        assert.ok(reset >= before + 60_000 && reset <= after + 60_000, `resetTime ${reset}, peek from ${before} to ${after} ms`);
        await request(`${s.url}/ok`);
        assert.equal((await request(`${s.url}/ok`)).status, 429);
        await s.limiter.resetKey('anon');
        assert.equal(await s.limiter.getKey('anon'), undefined);
        assert.equal((await request(`${s.url}/ok`)).status, 200);
      });

      it('a limit given as a function: the store counts, express-rate-limit decides', async (t) => {
        const s = await serve({ windowMs: 60_000, limit: (req) => (req.get('x-client') === 'gold' ? 3 : 1) });
        t.after(s.close);
        const gold = [];
        for (let i = 0; i < 4; i++) gold.push((await request(`${s.url}/ok`, { 'x-client': 'gold' })).status);
        assert.deepEqual(gold, [200, 200, 200, 429]);
        assert.deepEqual([(await request(`${s.url}/ok`)).status, (await request(`${s.url}/ok`)).status], [200, 429]);
        assert.equal((await s.limiter.getKey('gold')).totalHits, 4, 'counted like express-rate-limit\'s own stores');
      });

      it('other algorithms: token bucket', async (t) => {
        const store = new ExpressStore({ ...sender(), algorithm: 'token', prefix: `${version}:${senderName}:token:`, clock: () => T0 });
        const s = await serve({ windowMs: 60_000, limit: 2 }, store);
        t.after(s.close);
        const statuses = [];
        for (let i = 0; i < 3; i++) statuses.push((await request(`${s.url}/ok`)).status);
        assert.deepEqual(statuses, [200, 200, 429]);
        assert.equal(await server.command('TYPE', `${version}:${senderName}:token:anon`), 'thr-token');
      });

      it('a flood of 200 concurrent requests admits exactly the limit', async (t) => {
        const s = await serve({ windowMs: 60_000, limit: 50 });
        t.after(s.close);
        assert.deepEqual(await flood(`${s.url}/ok`, 200), { 200: 50, 429: 150 });
      });
    });
  }
}

describe('ExpressStore options', () => {
  it('takes exactly one of sendCommand, sendCommandCluster, client', () => {
    assert.throws(() => new ExpressStore({}), /exactly one of sendCommand, sendCommandCluster or client/);
    assert.throws(() => new ExpressStore({ client: nodeRedis, sendCommand: () => {} }), /exactly one/);
    assert.throws(() => new ExpressStore({ client: nodeRedis, algorithm: 'gcra' }), /unknown algorithm/);
  });

  it('refuses an option it does not implement, by name, instead of ignoring it', () => {
    const sendCommand = (...args) => nodeRedis.sendCommand(args);
    // rate-limit-redis 5's option, which rate-limit-redis 6 refuses too
    assert.throws(() => new ExpressStore({ sendCommand, resetExpiryOnChange: true }), {
      name: 'TypeError',
      message: /^redis-throttle: ExpressStore does not support the option resetExpiryOnChange \(rate-limit-redis 5's, removed in rate-limit-redis 6/,
    });
    assert.throws(() => new ExpressStore({ sendCommand, resetExpiryOnChange: false }), /option resetExpiryOnChange/);
    assert.throws(() => new ExpressStore({ sendCommand, windowMs: 1000, expiry: 60 }), /does not support the options windowMs \(give it to rateLimit\(\).*\), expiry; it takes sendCommand, sendCommandCluster, client, algorithm, prefix, clock$/);
    assert.throws(() => new ExpressStore({ sendCommand: nodeRedis }), /sendCommand must be a function, got object/);
    assert.throws(() => new ExpressStore({ client: nodeRedis, prefix: 42 }), /prefix must be a string, got number/);
    assert.throws(() => new ExpressStore({ client: {} }), /expected a node-redis client or cluster/);
    assert.throws(() => new ExpressStore('redis://127.0.0.1'), /ExpressStore takes an options object, got string/);
    // an option given as undefined is not given
    new ExpressStore({ sendCommand, prefix: undefined, resetExpiryOnChange: undefined });
  });

  it('token, leaky and sliding-exact need a fixed limit', () => {
    for (const algorithm of ['token', 'leaky', 'sliding-exact']) {
      const store = new ExpressStore({ client: nodeRedis, algorithm });
      assert.throws(() => store.init({ windowMs: 1000, limit: () => 5 }), /needs a fixed limit of at least 1/);
    }
    new ExpressStore({ client: nodeRedis, algorithm: 'sliding' }).init({ windowMs: 1000, limit: () => 5 });
  });

  it('client: a node-redis or ioredis client directly', async (t) => {
    for (const client of [nodeRedis, ioredis]) {
      const limiter = rateLimit8({ windowMs: 60_000, limit: 1, store: new ExpressStore({ client, prefix: `client:${client === ioredis}:` }) });
      const s = await listen(app(limiter));
      t.after(s.close);
      assert.deepEqual([(await request(`${s.url}/ok`)).status, (await request(`${s.url}/ok`)).status], [200, 429]);
    }
  });
});

describe('a server without the module', () => {
  it('the first request fails with an error that says how to load the module', async () => {
    const bare = await startServer({ module: false });
    const client = await createClient({ url: bare.url }).connect();
    const limiter = rateLimit8({ windowMs: 1000, limit: 1, store: new ExpressStore({ sendCommand: (...args) => client.sendCommand(args) }) });
    const s = await listen(app(limiter));
    try {
      const r = await request(`${s.url}/ok`);
      assert.equal(r.status, 500);
      assert.match(r.body, /^error: redis-throttle: the server has no THROTTLE\.FIXED command: the THROTTLE commands are missing .* `loadmodule \/path\/to\/libredis_throttle\.so`/);
    } finally {
      await s.close();
      await client.close();
      await bare.stop();
    }
  });
});
