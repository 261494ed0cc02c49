// NestStorage under @nestjs/throttler 6 in a NestJS app on the Express
// adapter, over real HTTP, against a real server with the module. The app is
// plain JavaScript: decorators are applied with Reflect.decorate.
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { describe, it, mock } from 'node:test';
import { Controller, Get, Module } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { SkipThrottle, Throttle as ThrottleRoute, ThrottlerGuard, ThrottlerModule, ThrottlerStorageService } from '@nestjs/throttler';
import { createClient } from 'redis';
import { NestStorage, ThrottleModuleMissingError } from 'redis-throttle';
import { flood, request } from './support/http.js';
import { serverWithClients, startServer } from './support/redis.js';

/** The storages' clock: Unix µs sent as AT, so every window and reset is exact. */
const T0 = 1_700_000_000_000_000;

let server;
let nodeRedis;
let ioredis;
serverWithClients((started) => ({ server, nodeRedis, ioredis } = started));

function method(target, name, ...decorators) {
  Reflect.decorate(decorators, target.prototype, name, Object.getOwnPropertyDescriptor(target.prototype, name));
}

/** A Nest app with ThrottlerGuard global; GET /ok, /strict (limit 1 a minute), /free (skipped). Resolves to { url, close, errors }. */
async function serve(throttlerOptions) {
  class AppController {
    ok() {
      return 'ok';
    }
    strict() {
      return 'strict';
    }
    free() {
      return 'free';
    }
  }
  Reflect.decorate([Controller()], AppController);
  method(AppController, 'ok', Get('ok'));
  method(AppController, 'strict', Get('strict'), ThrottleRoute({ default: { limit: 1, ttl: 60_000 } }));
  method(AppController, 'free', Get('free'), SkipThrottle());
  class AppModule {}
  Reflect.decorate(
    [Module({
      imports: [ThrottlerModule.forRoot(throttlerOptions)],
      controllers: [AppController],
      providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
    })],
    AppModule,
  );
  const errors = [];
  const logger = { log() {}, warn() {}, debug() {}, verbose() {}, error: (...args) => errors.push(args.map(String).join(' ')) };
  const app = await NestFactory.create(AppModule, { logger });
  await app.listen(0, '127.0.0.1');
  return { url: `http://127.0.0.1:${app.getHttpServer().address().port}`, close: () => app.close(), errors };
}

const clients = { 'node-redis': () => nodeRedis, ioredis: () => ioredis };

for (const [clientName, client] of Object.entries(clients)) {
  describe(`@nestjs/throttler 6, Express adapter, ${clientName}`, () => {
    let n = 0;
    const storage = (options = {}) => new NestStorage(client(), { prefix: `nest:${clientName}:${n++}:`, clock: () => T0, ...options });

    it('admits the limit, then 429 with Retry-After; every header', async (t) => {
      const s = await serve({ throttlers: [{ ttl: 60_000, limit: 3 }], storage: storage() });
      t.after(s.close);
      const seen = [];
      for (let i = 0; i < 4; i++) seen.push(await request(`${s.url}/ok`));
      assert.deepEqual(seen.map((r) => r.status), [200, 200, 200, 429]);
      assert.deepEqual(seen.slice(0, 3).map((r) => r.headers['x-ratelimit-remaining']), ['2', '1', '0']);
      for (const r of seen.slice(0, 3)) {
        assert.equal(r.headers['x-ratelimit-limit'], '3');
        assert.equal(r.headers['x-ratelimit-reset'], '60', 'every request at T0: each hit counts for 60 s');
        assert.equal(r.headers['retry-after'], undefined);
      }
      // A blocked request gets Retry-After only, as with Nest's own storage.
      assert.equal(seen[3].headers['retry-after'], '60');
      assert.equal(seen[3].headers['x-ratelimit-limit'], undefined);
      assert.deepEqual(JSON.parse(seen[3].body), { statusCode: 429, message: 'ThrottlerException: Too Many Requests' });
    });

    it('route limits (@Throttle) and @SkipThrottle', async (t) => {
      const s = await serve({ throttlers: [{ ttl: 60_000, limit: 5 }], storage: storage() });
      t.after(s.close);
      assert.deepEqual([(await request(`${s.url}/strict`)).status, (await request(`${s.url}/strict`)).status], [200, 429]);
      const free = [];
      for (let i = 0; i < 7; i++) free.push((await request(`${s.url}/free`)).status);
      assert.deepEqual(free, [200, 200, 200, 200, 200, 200, 200]);
      assert.equal((await request(`${s.url}/ok`)).headers['x-ratelimit-remaining'], '4', 'each route has its own key');
    });

    it('named throttlers: every header with its suffix; blocked for blockDuration', async (t) => {
      const time = { now: T0 };
      const s = await serve({
        throttlers: [{ name: 'short', ttl: 60_000, limit: 2 }, { name: 'long', ttl: 3_600_000, limit: 5 }],
        storage: storage({ clock: () => time.now }),
      });
      t.after(s.close);
      const a = await request(`${s.url}/ok`);
      assert.equal(a.headers['x-ratelimit-limit-short'], '2');
      assert.equal(a.headers['x-ratelimit-remaining-short'], '1');
      assert.equal(a.headers['x-ratelimit-reset-short'], '60');
      assert.equal(a.headers['x-ratelimit-limit-long'], '5');
      assert.equal(a.headers['x-ratelimit-remaining-long'], '4');
      await request(`${s.url}/ok`);
      time.now = T0 + 24_000_000;
      const blocked = await request(`${s.url}/ok`);
      assert.equal(blocked.status, 429);
      assert.equal(blocked.headers['retry-after-short'], '60', 'blockDuration (default: ttl) from the hit that went over');
      time.now = T0 + 83_999_000;
      assert.equal((await request(`${s.url}/ok`)).status, 429, 'still blocked 1 ms before the block ends');
      time.now = T0 + 84_000_000;
      const again = await request(`${s.url}/ok`);
      assert.equal(again.status, 200, 'admitted once the block has ended');
      assert.equal(again.headers['x-ratelimit-remaining-long'], '2', 'the refused requests took nothing from the long limit');
    });

    it('another algorithm: fixed window', async (t) => {
      const prefix = `nest:${clientName}:fixed:`;
      const s = await serve({ throttlers: [{ ttl: 60_000, limit: 1 }], storage: storage({ algorithm: 'fixed', prefix }) });
      t.after(s.close);
      assert.deepEqual([(await request(`${s.url}/ok`)).status, (await request(`${s.url}/ok`)).status], [200, 429]);
      const keys = await server.command('KEYS', `${prefix}*`);
      const types = await Promise.all(keys.sort().map((key) => server.command('TYPE', key)));
      assert.deepEqual(types, ['thr-fixed', 'thr-fixed', 'thr-fixed'], 'the limit, its log and its window');
    });

    it('a flood of 200 concurrent requests admits exactly the limit', async (t) => {
      const s = await serve({ throttlers: [{ ttl: 60_000, limit: 50 }], storage: storage() });
      t.after(s.close);
      assert.deepEqual(await flood(`${s.url}/ok`, 200), { 200: 50, 429: 150 });
    });
  });
}

/** A storage that records what `inner` answers the guard, request by request. */
function recording(inner) {
  const answers = [];
  return {
    answers,
    increment: async (...args) => {
      const answer = await inner.increment(...args);
      answers.push({ ...answer });
      return answer;
    },
    onApplicationShutdown: () => inner.onApplicationShutdown?.(),
  };
}

describe("side by side with Nest's own in-memory storage (ThrottlerStorageService), time driven on both sides", () => {
  // Both apps get the same requests at the same (mocked) Date.now(); the
  // module's storage takes the same time as its clock (AT).
  const START_MS = T0 / 1000;
  const times = [0, 1000, 2000, 3000, 5000, 9000, 10_000, 11_500, 12_999, 13_000, 20_000, 27_999, 28_000, 29_000, 30_000, 31_000, 31_500, 45_000, 59_000, 60_000, 61_000];
  const cases = {
    'blockDuration longer than ttl': { ttl: 10_000, limit: 3, blockDuration: 25_000 },
    'blockDuration unset (ttl)': { ttl: 10_000, limit: 3 },
    'blockDuration shorter than ttl': { ttl: 10_000, limit: 3, blockDuration: 4000 },
    'blockDuration 0': { ttl: 10_000, limit: 2, blockDuration: 0 },
  };
  for (const [clientName, client] of Object.entries(clients)) {
    for (const [name, throttler] of Object.entries(cases)) {
      it(`${clientName}, ${name}: the same four fields for every hit, the same status and headers`, async (t) => {
        mock.timers.enable({ apis: ['Date'], now: START_MS });
        t.after(() => mock.timers.reset());
        const theirs = recording(new ThrottlerStorageService());
        const ours = recording(new NestStorage(client(), { prefix: `nest:side:${clientName}:${name}:`, clock: () => Date.now() * 1000 }));
        const a = await serve({ throttlers: [throttler], storage: theirs });
        t.after(a.close);
        const b = await serve({ throttlers: [throttler], storage: ours });
        t.after(b.close);
        const headers = (r) => Object.fromEntries(Object.entries(r.headers).filter(([k]) => /^(x-ratelimit|retry-after)/.test(k)));
        for (const ms of times) {
          mock.timers.setTime(START_MS + ms);
          const [x, y] = [await request(`${a.url}/ok`), await request(`${b.url}/ok`)];
          assert.equal(y.status, x.status, `status at ${ms} ms`);
          assert.deepEqual(headers(y), headers(x), `headers at ${ms} ms`);
        }
        assert.equal(ours.answers.length, times.length);
        for (const [i, ms] of times.entries()) {
          const mine = ours.answers[i];
          const nest = theirs.answers[i];
          // Nest's storage answers a negative timeToBlockExpire while not
          // blocked (seconds since its last block ended, or since 1970),
          // which its guard never reads: this storage answers 0.
          if (!nest.isBlocked) nest.timeToBlockExpire = 0;
          assert.deepEqual(mine, nest, `the answer at ${ms} ms`);
        }
        assert.ok(theirs.answers.some((r) => r.isBlocked), 'the sequence blocks');
      });
    }
  }
});

describe('NestStorage options', () => {
  it('refuses an option or a client it cannot use, by name', () => {
    assert.throws(() => new NestStorage(nodeRedis, { ttl: 60_000 }), {
      name: 'TypeError',
      message: /^redis-throttle: NestStorage does not support the option ttl \(give it to ThrottlerModule\.forRoot\(\{ throttlers \}\).*; it takes algorithm, prefix, clock$/,
    });
    assert.throws(() => new NestStorage(nodeRedis, { blockDuration: 0, keyPrefix: 'x' }), /does not support the options blockDuration \(.*\), keyPrefix;/);
    assert.throws(() => new NestStorage(nodeRedis, { algorithm: 'gcra' }), /unknown algorithm "gcra"/);
    assert.throws(() => new NestStorage({}), /expected a node-redis client or cluster/);
    assert.throws(() => new NestStorage('redis://127.0.0.1'), /expected a node-redis client or cluster/);
    new NestStorage(ioredis, { algorithm: 'token', prefix: 'n:' });
  });
});

describe('a server without the module', () => {
  it('the first request fails, and the error says how to load the module', async () => {
    const bare = await startServer({ module: false });
    const client = await createClient({ url: bare.url }).connect();
    const storage = new NestStorage(client);
    const s = await serve({ throttlers: [{ ttl: 1000, limit: 1 }], storage });
    try {
      await assert.rejects(storage.increment('k', 1000, 1, 1000, 'default'), ThrottleModuleMissingError);
      const r = await request(`${s.url}/ok`);
      assert.equal(r.status, 500);
      assert.ok(s.errors.some((e) => /the THROTTLE commands are missing .* `loadmodule \/path\/to\/libredis_throttle\.so`/.test(e)), s.errors.join('\n'));
    } finally {
      await s.close();
      await client.close();
      await bare.stop();
    }
  });
});
