// The three stores called as their frameworks call them, without the
// frameworks and their HTTP servers: each answer exact, time driven by the
// stores' clock (AT). Light enough to run on every server; the framework
// tests over real HTTP (express.test.js, fastify.test.js, nest.test.js)
// check the same stores inside the frameworks. A key lives for its
// reset_after in the server's real time, whatever the clock says: every
// window here is a minute or more, so that none ends between two calls.
import assert from 'node:assert/strict';
import { describe, it, mock } from 'node:test';
import { createRequire } from 'node:module';
import { ExpressStore, NestStorage, RateLimiterThrottle, createFastifyStore } from 'redis-throttle';
import { serverWithClients } from './support/redis.js';
import { ThrottlerStorageService } from '@nestjs/throttler';

/** @fastify/rate-limit's in-memory store, the reference for the fastify store's answers. */
const LocalStore = createRequire(import.meta.url)('@fastify/rate-limit/store/LocalStore.js');

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

    // The plugin's own in-memory store (store/LocalStore.js), on the same
    // sequence of hits with Date.now() at the same times: fastify's
    // `current` (refused requests counted) and `ttl`, request by request.
    const sideBySide = async (params, max, timeWindow, times) => {
      const time = movingClock();
      const Store = createFastifyStore(client(), { prefix: `fastify:${clientName}:${n++}:`, clock: time.clock });
      const ours = new Store({ global: true, ban: -1, ...params });
      const theirs = new LocalStore(params.continueExceeding ?? false, params.exponentialBackoff ?? false);
      const seen = [];
      mock.timers.enable({ apis: ['Date'], now: T0 / 1000 });
      try {
        for (const ms of times) {
          time.now = at(ms);
          mock.timers.setTime(T0 / 1000 + ms);
          const local = await call(theirs, 'incr', 'k', timeWindow, max);
          seen.push([ms, await call(ours, 'incr', 'k', timeWindow, max), { current: local.current, ttl: local.ttl }]);
        }
      } finally {
        mock.timers.reset();
      }
      for (const [ms, mine, local] of seen) assert.deepEqual(mine, local, `at ${ms} ms`);
      return seen.map(([, mine]) => mine);
    };

    it('ban: refused requests count in the window (TALLY), as in the plugin\'s own stores', async () => {
      const seen = await sideBySide({ ban: 2 }, 2, 60_000, [0, 1000, 2000, 3000, 4000, 5000, 59_000, 60_000]);
      assert.deepEqual(seen.map((r) => r.current), [1, 2, 3, 4, 5, 6, 7, 1]);
    });

    it('continueExceeding: each refused request restarts the window (BAN RENEW)', async () => {
      const seen = await sideBySide({ continueExceeding: true }, 1, 60_000, [0, 10_000, 50_000, 109_000, 168_999, 169_000]);
      assert.deepEqual(seen, [1, 2, 3, 4, 5, 6].map((current) => ({ current, ttl: 60_000 })), 'a minute from each refused request');
      const fresh = await sideBySide({ continueExceeding: true }, 1, 60_000, [0, 1000, 61_000, 62_000]);
      assert.deepEqual(fresh.map((r) => r.current), [1, 2, 1, 2], 'a minute without a refused request: a fresh window');
    });

    it('exponentialBackoff: each refused request doubles the ban (BAN BACKOFF), as the plugin\'s Redis store\'s PEXPIRE', async () => {
      // The plugin's LocalStore ends an item after timeWindow whatever its
      // doubled ttl says; its Redis store, which this one replaces, keeps the
      // key for the doubled ttl: these are that store's answers.
      const time = movingClock();
      const Store = createFastifyStore(client(), { prefix: `fastify:${clientName}:${n++}:`, clock: time.clock });
      const store = new Store({ global: true, ban: -1, exponentialBackoff: true });
      const seen = [];
      for (const ms of [0, 1000, 2000, 3000, 4000, 83_999, 84_000]) {
        time.now = at(ms);
        seen.push(await call(store, 'incr', 'k', 10_000, 1));
      }
      assert.deepEqual(seen, [
        { current: 1, ttl: 10_000 },
        { current: 2, ttl: 10_000 },
        { current: 3, ttl: 20_000 },
        { current: 4, ttl: 40_000 },
        { current: 5, ttl: 80_000 },
        { current: 6, ttl: 160_000 },
        { current: 7, ttl: 320_000 },
      ]);
      time.now = at(84_000 + 320_000);
      assert.deepEqual(await call(store, 'incr', 'k', 10_000, 1), { current: 1, ttl: 10_000 }, 'the ban ended: a fresh window');
      assert.deepEqual(await call(store, 'read', 'k', 10_000, 1), { current: 1, ttl: 10_000 }, 'read: a peek');
    });

    it('every penalty option on a route child, and on another algorithm', async () => {
      const time = movingClock();
      const prefix = `fastify:${clientName}:${n++}:`;
      const Store = createFastifyStore(client(), { prefix, algorithm: 'token', clock: time.clock });
      const child = new Store({ global: true, ban: -1 }).child({ ban: -1, continueExceeding: true, routeInfo: { method: 'GET', url: '/r' } });
      assert.deepEqual(await call(child, 'incr', 'k', 60_000, 1), { current: 1, ttl: 60_000 });
      assert.deepEqual(await call(child, 'incr', 'k', 60_000, 1), { current: 2, ttl: 60_000 });
      time.now = at(30_000);
      // A bucket keeps no more than its burst: refused requests answer max + 1 there.
      assert.deepEqual(await call(child, 'incr', 'k', 60_000, 1), { current: 2, ttl: 60_000 }, 'renewed');
      assert.deepEqual(await call(child, 'read', 'k', 60_000, 1), { current: 2, ttl: 60_000 }, 'read: in the ban');
      assert.equal(await server.command('TYPE', `${prefix}GET/r-k`), 'thr-token');
    });
  });

  describe(`NestStorage, ${clientName}`, () => {
    let n = 0;

    it("increment: Nest's own storage's answers, called with Date.now() at the same times (blockDuration longer, shorter, 0)", async (t) => {
      for (const [limit, blockDuration] of [[2, 90_000], [2, 20_000], [2, 0]]) {
        const time = movingClock();
        const storage = new NestStorage(client(), { prefix: `nest:${clientName}:${n++}:`, clock: time.clock });
        const theirs = new ThrottlerStorageService();
        mock.timers.enable({ apis: ['Date'], now: T0 / 1000 });
        const seen = [];
        try {
          for (const ms of [0, 20_000, 30_000, 40_000, 55_000, 60_000, 80_000, 89_999, 90_000, 120_000, 125_000]) {
            time.now = at(ms);
            mock.timers.setTime(T0 / 1000 + ms);
            const nest = await theirs.increment('k', 60_000, limit, blockDuration, 'default');
            if (!nest.isBlocked) nest.timeToBlockExpire = 0; // Nest's: a negative number the guard never reads
            seen.push([ms, await storage.increment('k', 60_000, limit, blockDuration, 'default'), { ...nest }]);
          }
        } finally {
          mock.timers.reset();
          theirs.onApplicationShutdown();
        }
        for (const [ms, mine, nest] of seen) assert.deepEqual(mine, nest, `blockDuration ${blockDuration}, at ${ms} ms`);
        assert.ok(seen.some(([, , nest]) => nest.isBlocked));
      }
    });

    it('another algorithm: fixed window; limit 0 blocks without a command', async () => {
      const prefix = `nest:${clientName}:${n++}:`;
      const storage = new NestStorage(client(), { prefix, algorithm: 'fixed', clock: () => T0 });
      assert.equal((await storage.increment('k', 600_000, 1, 0, 'default')).isBlocked, false);
      assert.deepEqual(await storage.increment('k', 600_000, 1, 0, 'default'), { totalHits: 2, timeToExpire: 600, isBlocked: true, timeToBlockExpire: 600 });
      assert.equal(await server.command('TYPE', `${prefix}{k}`), 'thr-fixed');
      assert.deepEqual(await storage.increment('z', 600_000, 0, 0, 'default'), { totalHits: 1, timeToExpire: 600, isBlocked: true, timeToBlockExpire: 600 });
      assert.deepEqual(await server.command('KEYS', `${prefix}*z*`), []);
    });
  });

  describe(`RateLimiterThrottle, ${clientName}`, () => {
    let n = 0;
    const limiter = (options = {}) => {
      const time = movingClock();
      const l = new RateLimiterThrottle({ storeClient: client(), keyPrefix: `rlf:${clientName}:${n++}`, clock: time.clock, ...options });
      return { l, time };
    };
    const res = (r) => ({ remainingPoints: r.remainingPoints, msBeforeNext: r.msBeforeNext, consumedPoints: r.consumedPoints, isFirstInDuration: r.isFirstInDuration });
    const rejected = async (promise) => res(await promise.then((r) => assert.fail(`resolved ${r}`), (r) => r));

    it('consume: resolves under points, rejects past them and counts the refused points; a key per limiter, of the module\'s type', async () => {
      const { l, time } = limiter({ points: 3, duration: 60 });
      assert.deepEqual(res(await l.consume('ip', 2)), { remainingPoints: 1, msBeforeNext: 60_000, consumedPoints: 2, isFirstInDuration: true });
      time.now = at(15_000);
      assert.deepEqual(res(await l.consume('ip')), { remainingPoints: 0, msBeforeNext: 45_000, consumedPoints: 3, isFirstInDuration: false });
      assert.deepEqual(await rejected(l.consume('ip', 2)), { remainingPoints: 0, msBeforeNext: 45_000, consumedPoints: 5, isFirstInDuration: false });
      assert.equal(await server.command('TYPE', l.getKey('ip')), 'thr-fixed');
      time.now = at(60_000);
      assert.deepEqual(res(await l.consume('ip')), { remainingPoints: 2, msBeforeNext: 60_000, consumedPoints: 1, isFirstInDuration: true }, 'a new window');
    });

    it('blockDuration: the consume past points bans the key (BAN) in the same command', async () => {
      const { l, time } = limiter({ points: 2, duration: 60, blockDuration: 600 });
      await l.consume('ip', 2);
      assert.deepEqual(await rejected(l.consume('ip')), { remainingPoints: 0, msBeforeNext: 600_000, consumedPoints: 3, isFirstInDuration: false });
      time.now = at(120_000);
      assert.deepEqual(await rejected(l.consume('ip')), { remainingPoints: 0, msBeforeNext: 480_000, consumedPoints: 4, isFirstInDuration: false }, 'still banned after the window');
      time.now = at(600_000);
      assert.equal((await l.consume('ip')).consumedPoints, 1, 'the ban ended: a fresh key');
    });

    it('penalty, reward, block, get, set and delete', async () => {
      const { l, time } = limiter({ points: 5, duration: 60 });
      assert.equal(await l.get('k'), null);
      assert.deepEqual(res(await l.penalty('k', 7)), { remainingPoints: 0, msBeforeNext: 60_000, consumedPoints: 7, isFirstInDuration: true });
      time.now = at(10_000);
      assert.deepEqual(res(await l.reward('k', 4)), { remainingPoints: 2, msBeforeNext: 50_000, consumedPoints: 3, isFirstInDuration: false });
      assert.deepEqual(res(await l.get('k')), { remainingPoints: 2, msBeforeNext: 50_000, consumedPoints: 3, isFirstInDuration: false });
      assert.deepEqual(res(await l.block('k', 300)), { remainingPoints: 0, msBeforeNext: 300_000, consumedPoints: 6, isFirstInDuration: false });
      time.now = at(70_000);
      assert.deepEqual(res(await l.get('k')), { remainingPoints: 0, msBeforeNext: 240_000, consumedPoints: 6, isFirstInDuration: false }, 'banned');
      assert.equal(await l.delete('k'), true);
      assert.equal(await l.delete('k'), false);
      assert.deepEqual(res(await l.set('k', 4, 60)), { remainingPoints: 0, msBeforeNext: 60_000, consumedPoints: 4, isFirstInDuration: false });
      assert.deepEqual(res(await l.get('k')), { remainingPoints: 1, msBeforeNext: 60_000, consumedPoints: 4, isFirstInDuration: false });
    });

    it('refuses an option it does not take, by name', () => {
      assert.throws(() => new RateLimiterThrottle({ storeClient: client(), points: 1, customIncrTtlLuaScript: 'return 1' }), /does not support the option customIncrTtlLuaScript \(the module replaces the Lua script/);
      assert.throws(() => new RateLimiterThrottle({ storeClient: client(), points: 1, clock: 5 }), /clock must be a function/);
      assert.throws(() => new RateLimiterThrottle({ points: 1, duration: 1 }), /storeClient is not set/);
      assert.throws(() => new RateLimiterThrottle({ storeClient: {}, points: 1, duration: 1 }), /expected a node-redis client or cluster/);
    });
  });
}
