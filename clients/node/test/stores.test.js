// The three stores called as their frameworks call them, without the
// frameworks and their HTTP servers: each answer exact, time driven by the
// stores' clock (AT). Light enough to run on every server; the framework
// tests over real HTTP (express.test.js, fastify.test.js, nest.test.js)
// check the same stores inside the frameworks. A key lives for its
// reset_after in the server's real time, whatever the clock says: every
// window here is a minute or more, so that none ends between two calls.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ExpressStore, NestStorage, createFastifyStore } from 'redis-throttle';
import { serverWithClients } from './support/redis.js';

const T0 = 1_700_000_000_000_000; // Unix µs
const at = (ms) => T0 + ms * 1000;

let server;
let nodeRedis;
let ioredis;
serverWithClients((started) => ({ server, nodeRedis, ioredis } = started));

const clients = {
  'node-redis 6 (RESP3)': () => nodeRedis,
  'ioredis 6 (RESP3 flat maps)': () => ioredis,
};

/** A clock the test moves: `time.now` in Unix µs. */
const movingClock = () => {
  const time = { now: T0, clock: () => time.now };
  return time;
};

/** resetTime as milliseconds from the call, within the call's own span. */
async function within(call, expectedMs) {
  const before = Date.now();
  const info = await call();
  const after = Date.now();
  const reset = info.resetTime.getTime();
  assert.ok(reset >= before + expectedMs && reset <= after + expectedMs, `resetTime ${reset - before} ms after the call's start, expected ${expectedMs}`);
  return info;
}

for (const [clientName, client] of Object.entries(clients)) {
  describe(`ExpressStore, ${clientName}`, () => {
    let n = 0;
    const store = (options = {}) => new ExpressStore({ client: client(), prefix: `express:${clientName}:${n++}:`, clock: () => T0, ...options });

    it('increment: the limit, then refused with the time until admitted; get peeks; decrement refunds; resetKey', async () => {
      const time = movingClock();
      const s = store({ clock: time.clock });
      s.init({ windowMs: 60_000, limit: 2 });
      assert.equal(await s.get('k'), undefined);
      assert.equal((await within(() => s.increment('k'), 60_000)).totalHits, 1);
      time.now = at(10_000);
      assert.equal((await within(() => s.increment('k'), 50_000)).totalHits, 2);
      time.now = at(20_000);
      assert.equal((await within(() => s.increment('k'), 40_000)).totalHits, 3, 'refused: limit + 1');
      assert.equal((await within(() => s.get('k'), 40_000)).totalHits, 2, 'the refused request took nothing');
      await s.decrement('k');
      assert.equal((await s.get('k')).totalHits, 1);
      time.now = at(60_000);
      assert.equal(await s.get('k'), undefined, 'the window has ended');
      assert.equal((await s.increment('k')).totalHits, 1);
      await s.resetKey('k');
      assert.equal(await s.get('k'), undefined);
      assert.equal(await server.command('EXISTS', `${s.prefix}k`), 0);
    });

    it('skipFailedRequests: the refund of a refused request is not paid out', async () => {
      const s = store();
      s.init({ windowMs: 60_000, limit: 1, skipFailedRequests: true });
      assert.equal((await s.increment('k')).totalHits, 1);
      assert.equal((await s.increment('k')).totalHits, 2, 'refused');
      await s.decrement('k'); // express-rate-limit's refund of the 429
      assert.equal((await s.get('k')).totalHits, 1);
      await s.decrement('k'); // the admitted request's refund
      assert.equal(await s.get('k'), undefined);
    });

    it('a limit given as a function: hits counted in a window that never refuses', async () => {
      const s = store();
      s.init({ windowMs: 60_000, limit: () => 1 });
      const hits = [];
      for (let i = 0; i < 4; i++) hits.push((await s.increment('k')).totalHits);
      assert.deepEqual(hits, [1, 2, 3, 4]);
    });

    for (const [algorithm, type] of [['sliding', 'thr-slide'], ['sliding-exact', 'thr-exact'], ['token', 'thr-token'], ['leaky', 'thr-leaky']]) {
      it(`algorithm ${algorithm}: the limit, then refused`, async () => {
        const s = store({ algorithm });
        s.init({ windowMs: 60_000, limit: 3 });
        const hits = [];
        for (let i = 0; i < 4; i++) hits.push((await s.increment('k')).totalHits);
        assert.deepEqual(hits, [1, 2, 3, 4]);
        assert.equal(await server.command('TYPE', `${s.prefix}k`), type);
      });
    }
  });

  describe(`createFastifyStore, ${clientName}`, () => {
    let n = 0;
    /** incr or read as the plugin calls them: (key, callback, timeWindow, max). */
    const call = (store, method, key, timeWindow, max) =>
      new Promise((resolve, reject) => store[method](key, (error, result) => (error ? reject(error) : resolve(result)), timeWindow, max));

    it('incr: the limit, then refused with the time until admitted; read peeks; a route child has its own keys', async () => {
      const time = movingClock();
      const prefix = `fastify:${clientName}:${n++}:`;
      const Store = createFastifyStore(client(), { prefix, clock: time.clock });
      const store = new Store({ global: true, ban: -1 });
      assert.deepEqual(await call(store, 'read', 'k', 60_000, 2), { current: 0, ttl: 0 });
      assert.deepEqual(await call(store, 'incr', 'k', 60_000, 2), { current: 1, ttl: 60_000 });
      time.now = at(15_000);
      assert.deepEqual(await call(store, 'incr', 'k', 60_000, 2), { current: 2, ttl: 45_000 });
      assert.deepEqual(await call(store, 'incr', 'k', 60_000, 2), { current: 3, ttl: 45_000 }, 'refused: max + 1, ttl until admitted');
      assert.deepEqual(await call(store, 'read', 'k', 60_000, 2), { current: 2, ttl: 45_000 });
      time.now = at(60_000);
      assert.deepEqual(await call(store, 'incr', 'k', 60_000, 2), { current: 1, ttl: 60_000 });
      const child = store.child({ ban: -1, routeInfo: { method: 'GET', url: '/r' } });
      assert.deepEqual(await call(child, 'incr', 'k', 60_000, 1), { current: 1, ttl: 60_000 });
      assert.equal(await server.command('TYPE', `${prefix}GET/r-k`), 'thr-fixed');
      assert.deepEqual(await call(store, 'incr', 'k', 60_000, 0), { current: 1, ttl: 60_000 }, 'max 0 refuses without a command');
    });

    it('refuses the options that count refused requests, at construction', () => {
      const Store = createFastifyStore(client(), { prefix: `fastify:${clientName}:${n++}:` });
      assert.throws(() => new Store({ continueExceeding: true }), /does not support continueExceeding/);
      assert.throws(() => new Store({ ban: 3 }), /does not support ban: 3/);
      const store = new Store({ ban: 0 });
      assert.throws(() => store.child({ exponentialBackoff: true, routeInfo: {} }), /does not support exponentialBackoff/);
    });
  });

  describe(`NestStorage, ${clientName}`, () => {
    let n = 0;

    it('increment: the limit, then blocked until the module admits again (sliding-exact)', async () => {
      const time = movingClock();
      const storage = new NestStorage(client(), { prefix: `nest:${clientName}:${n++}:`, clock: time.clock });
      const hit = () => storage.increment('k', 60_000, 2, 60_000, 'default');
      assert.deepEqual(await hit(), { totalHits: 1, timeToExpire: 60, isBlocked: false, timeToBlockExpire: 0 });
      time.now = at(20_000);
      assert.deepEqual(await hit(), { totalHits: 2, timeToExpire: 60, isBlocked: false, timeToBlockExpire: 0 });
      time.now = at(30_000);
      assert.deepEqual(await hit(), { totalHits: 3, timeToExpire: 50, isBlocked: true, timeToBlockExpire: 30 });
      time.now = at(60_000);
      assert.deepEqual(await hit(), { totalHits: 2, timeToExpire: 60, isBlocked: false, timeToBlockExpire: 0 }, 'the first hit has left the window');
    });

    it('another algorithm: fixed window; limit 0 blocks without a command', async () => {
      const prefix = `nest:${clientName}:${n++}:`;
      const storage = new NestStorage(client(), { prefix, algorithm: 'fixed', clock: () => T0 });
      assert.equal((await storage.increment('k', 600_000, 1, 0, 'default')).isBlocked, false);
      assert.deepEqual(await storage.increment('k', 600_000, 1, 0, 'default'), { totalHits: 2, timeToExpire: 600, isBlocked: true, timeToBlockExpire: 600 });
      assert.equal(await server.command('TYPE', `${prefix}k`), 'thr-fixed');
      assert.deepEqual(await storage.increment('z', 600_000, 0, 0, 'default'), { totalHits: 1, timeToExpire: 600, isBlocked: true, timeToBlockExpire: 600 });
      assert.equal(await server.command('EXISTS', `${prefix}z`), 0);
    });
  });
}
