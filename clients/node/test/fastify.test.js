// createFastifyStore under fastify 5 with @fastify/rate-limit 11 (and 10),
// over real HTTP, against a real server with the module.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import Fastify from 'fastify';
import rateLimit11 from '@fastify/rate-limit';
import rateLimit10 from '@fastify/rate-limit-10';
import { Redis } from 'ioredis';
import { createFastifyStore } from 'redis-throttle';
import { flood, request } from './support/http.js';
import { serverWithClients, startServer } from './support/redis.js';

/** The stores' clock: Unix µs sent as AT, so every window and reset is exact. */
const T0 = 1_700_000_000_000_000;

let server;
let nodeRedis;
let ioredis;
serverWithClients((started) => ({ server, nodeRedis, ioredis } = started));

/** A fastify app with the plugin registered with `options` and /ok; `routes(app)` adds more. Resolves to { url, app }. */
async function serve(rateLimit, options, routes = () => {}) {
  const app = Fastify();
  await app.register(rateLimit, options);
  app.get('/ok', async () => 'ok');
  routes(app);
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { app, url: `http://127.0.0.1:${app.server.address().port}` };
}

const versions = { '@fastify/rate-limit 11': rateLimit11, '@fastify/rate-limit 10': rateLimit10 };
const clients = { 'node-redis': () => nodeRedis, ioredis: () => ioredis };

for (const [version, rateLimit] of Object.entries(versions)) {
  for (const [clientName, client] of Object.entries(clients)) {
    describe(`${version}, ${clientName}`, () => {
      let n = 0;
      const store = (options = {}) => createFastifyStore(client(), { prefix: `${version}:${clientName}:${n++}:`, clock: () => T0, ...options });

      it('admits max, then 429 with every header and the plugin\'s own body', async (t) => {
        const s = await serve(rateLimit, { max: 3, timeWindow: '1 minute', store: store() });
        t.after(() => s.app.close());
        const seen = [];
        for (let i = 0; i < 4; i++) seen.push(await request(`${s.url}/ok`));
        assert.deepEqual(seen.map((r) => r.status), [200, 200, 200, 429]);
        assert.deepEqual(seen.map((r) => r.headers['x-ratelimit-remaining']), ['2', '1', '0', '0']);
        for (const r of seen) {
          assert.equal(r.headers['x-ratelimit-limit'], '3');
          assert.equal(r.headers['x-ratelimit-reset'], '60', 'every request at T0: the window ends 60 s after it');
        }
        assert.equal(seen[0].headers['retry-after'], undefined);
        assert.equal(seen[3].headers['retry-after'], seen[3].headers['x-ratelimit-reset']);
        assert.match(seen[3].headers['content-type'], /^application\/json/);
        const body = JSON.parse(seen[3].body);
        assert.deepEqual({ ...body, message: undefined }, { statusCode: 429, error: 'Too Many Requests', message: undefined });
        assert.equal(body.message, 'Rate limit exceeded, retry in 1 minute');
      });

      it('the draft spec headers', async (t) => {
        const s = await serve(rateLimit, { max: 1, timeWindow: 60_000, enableDraftSpec: true, store: store() });
        t.after(() => s.app.close());
        const a = await request(`${s.url}/ok`);
        assert.equal(a.headers['ratelimit-limit'], '1');
        assert.equal(a.headers['ratelimit-remaining'], '0');
        assert.equal(a.headers['ratelimit-reset'], '60');
        const b = await request(`${s.url}/ok`);
        assert.equal(b.status, 429);
        assert.equal(b.headers['retry-after'], '60');
        assert.equal(b.headers['x-ratelimit-limit'], undefined);
      });

      it('the window resets: refused until Retry-After has passed, then a new window', async (t) => {
        const time = { now: T0 };
        const s = await serve(rateLimit, { max: 2, timeWindow: 60_000, store: store({ clock: () => time.now }) });
        t.after(() => s.app.close());
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

      it('per-route limits (child): their own max, window and keys', async (t) => {
        const prefix = `${version}:${clientName}:routes:`;
        const s = await serve(rateLimit, { global: false, store: store({ prefix }) }, (app) => {
          app.get('/one', { config: { rateLimit: { max: 1, timeWindow: 60_000 } } }, async () => 'one');
          app.get('/two', { config: { rateLimit: { max: 2, timeWindow: '1 minute' } } }, async () => 'two');
        });
        t.after(() => s.app.close());
        const one = [(await request(`${s.url}/one`)).status, (await request(`${s.url}/one`)).status];
        const two = [];
        for (let i = 0; i < 3; i++) two.push((await request(`${s.url}/two`)).status);
        assert.deepEqual(one, [200, 429]);
        assert.deepEqual(two, [200, 200, 429]);
        assert.equal((await request(`${s.url}/ok`)).headers['x-ratelimit-limit'], undefined, 'global: false');
        assert.equal(await server.command('TYPE', `${prefix}GET/one-127.0.0.1`), 'thr-fixed');
      });

      it('ban: 0 answers 403 from the first refused request', async (t) => {
        const s = await serve(rateLimit, { max: 1, timeWindow: 60_000, ban: 0, store: store() });
        t.after(() => s.app.close());
        assert.deepEqual([(await request(`${s.url}/ok`)).status, (await request(`${s.url}/ok`)).status], [200, 403]);
      });

      it('ban: 403 once refused requests pass max + ban in the window', async (t) => {
        const time = { now: T0 };
        const s = await serve(rateLimit, { max: 1, timeWindow: 60_000, ban: 2, store: store({ clock: () => time.now }) });
        t.after(() => s.app.close());
        const seen = [];
        for (let i = 0; i < 5; i++) seen.push(await request(`${s.url}/ok`));
        assert.deepEqual(seen.map((r) => r.status), [200, 429, 429, 403, 403]);
        assert.equal(JSON.parse(seen[3].body).error, 'Forbidden');
        assert.equal(seen[3].headers['retry-after'], '60');
        time.now = T0 + 60_000_000;
        assert.equal((await request(`${s.url}/ok`)).status, 200, 'a new window');
      });

      it('continueExceeding: each refused request restarts the window; exponentialBackoff doubles it', async (t) => {
        const time = { now: T0 };
        const s = await serve(rateLimit, { max: 1, timeWindow: 60_000, continueExceeding: true, store: store({ clock: () => time.now }) }, (app) => {
          app.get('/backoff', { config: { rateLimit: { max: 1, timeWindow: 60_000, continueExceeding: false, exponentialBackoff: true } } }, async () => 'b');
        });
        t.after(() => s.app.close());
        assert.equal((await request(`${s.url}/ok`)).status, 200);
        time.now = T0 + 30_000_000;
        assert.equal((await request(`${s.url}/ok`)).headers['retry-after'], '60', 'refused: a minute from now');
        time.now = T0 + 89_000_000;
        assert.equal((await request(`${s.url}/ok`)).headers['retry-after'], '60', 'refused again: restarted');
        time.now = T0 + 148_999_000;
        assert.equal((await request(`${s.url}/ok`)).status, 429, 'still refused 1 ms before the last minute ends');
        time.now = T0 + 208_999_000;
        assert.equal((await request(`${s.url}/ok`)).status, 200, 'a quiet minute: admitted');
        time.now = T0;
        const backoff = [];
        for (let i = 0; i < 5; i++) backoff.push(await request(`${s.url}/backoff`));
        assert.deepEqual(backoff.map((r) => r.status), [200, 429, 429, 429, 429]);
        assert.deepEqual(backoff.slice(1).map((r) => r.headers['retry-after']), ['60', '120', '240', '480']);
      });

      it('another algorithm: sliding window', async (t) => {
        const prefix = `${version}:${clientName}:sliding:`;
        const s = await serve(rateLimit, { max: 2, timeWindow: 60_000, store: store({ algorithm: 'sliding', prefix }) });
        t.after(() => s.app.close());
        const statuses = [];
        for (let i = 0; i < 3; i++) statuses.push((await request(`${s.url}/ok`)).status);
        assert.deepEqual(statuses, [200, 200, 429]);
        assert.equal(await server.command('TYPE', `${prefix}127.0.0.1`), 'thr-slide');
      });

      if (version === '@fastify/rate-limit 11') {
        it('createRateLimit with { increment: false }: a peek (COST 0)', async (t) => {
          const s = await serve(rateLimit, { global: false, max: 2, timeWindow: 60_000, store: store() }, (app) => {
            const check = app.createRateLimit();
            app.get('/peek', async (req) => check(req, { increment: false }));
            app.get('/consume', async (req) => check(req));
          });
          t.after(() => s.app.close());
          const remaining = async (path) => JSON.parse((await request(`${s.url}${path}`)).body).remaining;
          assert.deepEqual(
            [await remaining('/peek'), await remaining('/consume'), await remaining('/peek'), await remaining('/consume'), await remaining('/peek')],
            [2, 1, 1, 0, 0],
          );
          const refused = JSON.parse((await request(`${s.url}/consume`)).body);
          assert.equal(refused.isExceeded, true);
          assert.equal(JSON.parse((await request(`${s.url}/peek`)).body).isExceeded, false, 'a peek at a full window is not over it');
        });
      }

      it('a flood of 200 concurrent requests admits exactly max', async (t) => {
        const s = await serve(rateLimit, { max: 50, timeWindow: 60_000, store: store() });
        t.after(() => s.app.close());
        assert.deepEqual(await flood(`${s.url}/ok`, 200), { 200: 50, 429: 150 });
      });
    });
  }
}

describe('createFastifyStore options', () => {
  it('refuses an option or a client it cannot use, by name, when it is created', () => {
    assert.throws(() => createFastifyStore(ioredis, { nameSpace: 'rl:' }), {
      name: 'TypeError',
      message: "redis-throttle: createFastifyStore does not support the option nameSpace (the plugin's option for its own Redis store: give this store's prefix); it takes algorithm, prefix, clock",
    });
    assert.throws(() => createFastifyStore(ioredis, { continueExceeding: true }), /createFastifyStore does not support the option continueExceeding \(give it to the plugin/);
    assert.throws(() => createFastifyStore(ioredis, { prefix: ['a'] }), /prefix must be a string, got object/);
    assert.throws(() => createFastifyStore(ioredis, { clock: 5 }), /clock must be a function, got number/);
    assert.throws(() => createFastifyStore({}), /expected a node-redis client or cluster/);
    assert.throws(() => createFastifyStore(undefined), /expected a node-redis client or cluster/);
    createFastifyStore(nodeRedis, { algorithm: 'leaky', prefix: 'x:', clock: undefined });
  });
});

describe('a server without the module', () => {
  it('the first request fails with an error that says how to load the module', async () => {
    const bare = await startServer({ module: false });
    const client = new Redis({ port: bare.port, host: '127.0.0.1' });
    const s = await serve(rateLimit11, { max: 1, store: createFastifyStore(client) });
    try {
      const r = await request(`${s.url}/ok`);
      assert.equal(r.status, 500);
      assert.match(JSON.parse(r.body).message, /^redis-throttle: the server has no THROTTLE\.FIXED command: the THROTTLE commands are missing .* `loadmodule \/path\/to\/libredis_throttle\.so`/);
    } finally {
      await s.app.close();
      client.disconnect();
      await bare.stop();
    }
  });
});
