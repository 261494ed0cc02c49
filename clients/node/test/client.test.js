// The Throttle client on every supported client, in every protocol, against a
// real server with the module; time driven by AT, so every value is exact.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createSentinel } from 'redis';
import { Throttle, ThrottleModuleMissingError } from 'redis-throttle';
import { close, singleClients } from './clients.js';
import { eventually } from './support/http.js';
import { startServer } from './support/redis.js';

const T0 = 1_700_000_000_000_000; // Unix µs
const s = (seconds) => T0 + seconds * 1_000_000;
const reply = (allowed, limit, remaining, retryAfter, resetAfter) => ({ allowed: !!allowed, limit, remaining, retryAfter, resetAfter });
const detailed = (allowed, limit, remaining, retryAfter, resetAfter, hits, banned, nextFree) => ({ ...reply(allowed, limit, remaining, retryAfter, resetAfter), hits, banned, nextFree });
// A key lives for its reset_after in the server's real time, whatever AT says:
// the limits here keep every key for a minute or more, so that no key
// expires between two calls of a test however slow the machine is.

let server;
before(async () => {
  server = await startServer();
});
after(() => server?.stop());

for (const [name, connect] of Object.entries(singleClients)) {
  describe(name, () => {
    let client;
    let throttle;
    const p = `${name.replace(/\W+/g, '-')}:`;
    before(async () => {
      client = await connect(server);
      throttle = new Throttle(client, { prefix: p });
    });
    after(() => client && close(client));

    it('fixed: the README window, with a period string and in milliseconds', async () => {
      assert.deepEqual(await throttle.fixed('alice', 3, '1m', { at: s(0) }), reply(1, 3, 2, 0, 60000));
      assert.deepEqual(await throttle.fixed('alice', 3, 60_000, { cost: 2, at: s(30) }), reply(1, 3, 0, 0, 30000));
      assert.deepEqual(await throttle.fixed('alice', 3, '1m', { at: s(45) }), reply(0, 3, 0, 15000, 15000));
      assert.equal(await server.command('TYPE', `${p}alice`), 'thr-fixed');
    });

    it('sliding: the estimate, and exact', async () => {
      assert.deepEqual(await throttle.sliding('bob', 10, '10m', { cost: 10, at: 540_000_000 }), reply(1, 10, 0, 0, 660_000));
      assert.deepEqual(await throttle.sliding('bob', 10, 600_000, { at: 720_000_000 }), reply(1, 10, 1, 0, 1_080_000));
      assert.deepEqual(await throttle.sliding('sms', 3, '1h', { exact: true, at: s(0) }), reply(1, 3, 2, 0, 3_600_000));
      assert.equal(await server.command('TYPE', `${p}sms`), 'thr-exact');
    });

    it('token and leaky, with burst', async () => {
      assert.deepEqual(await throttle.token('carol', 10, '1h', { burst: 20, cost: 20, at: s(0) }), reply(1, 20, 0, 0, 7_200_000));
      assert.deepEqual(await throttle.token('carol', 10, 3_600_000, { burst: 20, at: s(180) }), reply(0, 20, 0, 180_000, 7_020_000));
      assert.deepEqual(await throttle.token('carol', 10, '1h', { burst: 20, at: s(360) }), reply(1, 20, 0, 0, 7_200_000));
      const leaky = [];
      for (let i = 0; i < 4; i++) leaky.push(await throttle.leaky('gateway', 10, '1h', { burst: 3, at: s(0) }));
      assert.deepEqual(leaky, [reply(1, 3, 2, 0, 360_000), reply(1, 3, 1, 360_000, 720_000), reply(1, 3, 0, 720_000, 1_080_000), reply(0, 3, 0, 360_000, 1_080_000)]);
    });

    it('a peek (cost 0) and a refund (negative cost)', async () => {
      await throttle.fixed('dave', 5, '1m', { cost: 3, at: s(0) });
      assert.deepEqual(await throttle.fixed('dave', 5, '1m', { cost: 0, at: s(1) }), reply(1, 5, 2, 0, 59000));
      assert.deepEqual(await throttle.fixed('dave', 5, '1m', { cost: -2, at: s(2) }), reply(1, 5, 4, 0, 58000));
    });

    it('all: several limits at once', async () => {
      const limits = [
        { algorithm: 'fixed', key: '{u42}:s', limit: 10, period: '1m' },
        { algorithm: 'sliding-exact', key: '{u42}:h', limit: 1000, period: '1h' },
      ];
      assert.deepEqual(await throttle.all(limits, { at: s(0) }), {
        allowed: true,
        results: [reply(1, 10, 9, 0, 60_000), reply(1, 1000, 999, 0, 3_600_000)],
      });
      const refused = await throttle.all(limits, { cost: 10, at: s(30) });
      assert.deepEqual(refused, { allowed: false, results: [reply(0, 10, 9, 30_000, 30_000), reply(1, 1000, 999, 0, 3_570_000)] });
    });

    it('ban: the penalties page\'s login ban, with detail', async () => {
      const login = { ban: '15m' };
      assert.deepEqual(await throttle.fixed('eve', 3, '1m', { ...login, at: s(0) }), reply(1, 3, 2, 0, 60000));
      assert.deepEqual(await throttle.fixed('eve', 3, '1m', { ...login, cost: 3, at: s(1) }), reply(0, 3, 0, 900_000, 900_000));
      assert.deepEqual(await throttle.fixed('eve', 3, '1m', { ...login, detail: true, at: s(62) }), detailed(0, 3, 0, 839_000, 839_000, 1, 839_000, 839_000));
      const info = await throttle.info('eve', { at: s(62) });
      assert.equal(info.banned, 839_000);
      assert.equal(info.banLength, 900_000);
      assert.equal(info.hits, 1);
      assert.deepEqual(await throttle.fixed('eve', 3, 60_000, { ban: 900_000, at: s(902) }), reply(1, 3, 2, 0, 60000));
    });

    it('ban with backoff doubles, with renew restarts; tally counts refused units', async () => {
      const bot = { ban: '1m', backoff: '1h' };
      assert.deepEqual(await throttle.fixed('bot', 3, '1m', { ...bot, cost: 4, at: s(0) }), reply(0, 3, 0, 60_000, 60_000));
      assert.deepEqual(await throttle.fixed('bot', 3, '1m', { ...bot, at: s(30) }), reply(0, 3, 0, 120_000, 120_000));
      assert.deepEqual(await throttle.fixed('bot', 3, '1m', { ...bot, at: s(40) }), reply(0, 3, 0, 240_000, 240_000));
      // renew: each refused call restarts the ban for its length
      await throttle.token('hammer', 2, '1m', { cost: 2, at: s(0) });
      assert.deepEqual(await throttle.token('hammer', 2, '1m', { ban: '1m', renew: true, at: s(1) }), reply(0, 2, 0, 60_000, 60_000));
      assert.deepEqual(await throttle.token('hammer', 2, '1m', { ban: '1m', renew: true, at: s(31) }), reply(0, 2, 0, 60_000, 60_000));
      assert.deepEqual(await throttle.token('hammer', 2, '1m', { at: s(61) }), reply(0, 2, 0, 30_000, 30_000), 'a call without ban is refused by the ban');
      // tally: refused units count, up to the cap
      const tally = { tally: 4, detail: true };
      await throttle.fixed('tally', 2, '1m', { cost: 2, at: s(0) });
      assert.deepEqual(await throttle.fixed('tally', 2, '1m', { ...tally, at: s(1) }), detailed(0, 2, 0, 59_000, 59_000, 3, 0, 59_000));
      assert.deepEqual(await throttle.fixed('tally', 2, '1m', { ...tally, cost: 5, at: s(2) }), detailed(0, 2, 0, -1, 58_000, 4, 0, 58_000), 'counted up to the cap');
      assert.deepEqual(await throttle.fixed('tally', 2, '1m', { ...tally, at: s(3) }), detailed(0, 2, 0, 57_000, 57_000, 4, 0, 57_000), 'no further');
    });

    it('force takes units that do not fit; banNow bans at once; a refund leaves the ban', async () => {
      assert.deepEqual(await throttle.fixed('forced', 2, '1m', { force: true, cost: 3, detail: true, at: s(0) }), detailed(0, 2, 0, -1, 60_000, 3, 0, 60_000));
      assert.deepEqual(await throttle.fixed('forced', 2, '1m', { cost: 0, detail: true, at: s(1) }), detailed(1, 2, 0, 0, 59_000, 3, 0, 59_000));
      assert.deepEqual(await throttle.sliding('manual', 5, '1m', { ban: '10m', banNow: true, cost: 0, detail: true, at: s(0) }), detailed(0, 5, 0, 600_000, 600_000, 0, 600_000, 600_000));
      assert.deepEqual(await throttle.sliding('manual', 5, '1m', { cost: -1, detail: true, at: s(1) }), detailed(1, 5, 0, 0, 599_000, 0, 599_000, 599_000));
      const fresh = await throttle.sliding('manual', 5, '1m', { at: s(600) });
      assert.deepEqual([fresh.allowed, fresh.remaining], [true, 4], 'the ban ended: a fresh key');
      assert.deepEqual(await throttle.leaky('forced-ban', 2, '1m', { ban: '5m', force: true, cost: 3, at: s(0) }), reply(0, 2, 0, 300_000, 300_000));
    });

    it('all: each limit its own ban and tally; detail on every result', async () => {
      const limits = [
        { algorithm: 'fixed', key: '{u7}:s', limit: 2, period: '1m', ban: '5m' },
        { algorithm: 'token', key: '{u7}:h', limit: 100, period: '1h', tally: 1000 },
      ];
      const first = await throttle.all(limits, { cost: 2, detail: true, at: s(0) });
      assert.deepEqual(first, { allowed: true, results: [detailed(1, 2, 0, 0, 60_000, 2, 0, 60_000), detailed(1, 100, 98, 0, 72_000, 2, 0, 36_000)] });
      const refused = await throttle.all(limits, { detail: true, at: s(1) });
      assert.equal(refused.allowed, false);
      assert.deepEqual(refused.results[0], detailed(0, 2, 0, 300_000, 300_000, 2, 300_000, 300_000), 'the limit that refused starts its ban');
      assert.equal(refused.results[1].hits, 2, 'the limit that would have admitted changes nothing');
      assert.equal((await throttle.all(limits, { at: s(200) })).allowed, false, 'banned');
    });

    it('info: each field, camel-cased; null for a missing key', async () => {
      await throttle.token('erin', 10, '1h', { burst: 20, cost: 15, at: s(0) });
      assert.deepEqual(await throttle.info('erin', { at: s(3600) }), {
        algorithm: 'token', limit: 10, periodMs: 3_600_000, burst: 20, updatedAt: s(0), remaining: 15, resetAfter: 1_800_000,
      });
      await throttle.fixed('frank', 3, '1m', { at: s(0) });
      const fixed = await throttle.info('frank');
      assert.equal(fixed.algorithm, 'fixed');
      assert.equal(fixed.windowStart, s(0));
      assert.equal(fixed.used, 1);
      assert.equal(await throttle.info('nobody'), null);
    });

    it('reset deletes the key', async () => {
      await throttle.fixed('gina', 1, '1m', { at: s(0) });
      assert.equal((await throttle.fixed('gina', 1, '1m', { at: s(1) })).allowed, false);
      await throttle.reset('gina');
      assert.equal((await throttle.fixed('gina', 1, '1m', { at: s(1) })).allowed, true);
    });

    it("the server's errors come through as they are", async () => {
      await assert.rejects(throttle.token('h', 10, '1s', { burst: 0 }), { message: 'ERR invalid BURST: expected an integer from 1 to 1000000000000000' });
      await throttle.fixed('i', 1, '1s');
      await assert.rejects(throttle.token('i', 1, '1s'), { message: /^WRONGTYPE Operation against a key holding the wrong kind of value/ });
    });
  });
}

describe('arguments', () => {
  let client;
  let throttle;
  before(async () => {
    client = await singleClients['node-redis 6, RESP3 (its default)'](server);
    throttle = new Throttle(client, { prefix: 'args:' });
  });
  after(() => client && close(client));

  it('checks periods, limits and options before sending anything', async () => {
    await assert.rejects(throttle.fixed('k', 1, 0), /period must be a positive integer of milliseconds/);
    await assert.rejects(throttle.fixed('k', 1, 1.5), /period must be a positive integer/);
    await assert.rejects(throttle.fixed('k', 1, '1 minute'), /period must be milliseconds or a period string/);
    await assert.rejects(throttle.fixed('k', 1.5, '1s'), /limit must be an integer/);
    await assert.rejects(throttle.fixed('k', 1, '1s', { block: -1 }), /block must be a non-negative integer/);
    await assert.rejects(throttle.call({ algorithm: 'gcra', key: 'k', limit: 1, period: 1 }), /unknown algorithm "gcra"/);
    await assert.rejects(throttle.all([]), /needs at least one limit/);
    assert.equal(await server.command('EXISTS', 'args:k'), 0);
    assert.throws(() => new Throttle({}), /expected a node-redis client or cluster .* got an object without sendCommand or call \(keys: none\)/);
    assert.throws(() => new Throttle(null), /expected a node-redis client or cluster .* got null/);
    assert.throws(() => new Throttle('redis://127.0.0.1:6379'), /expected a node-redis client or cluster .* got string/);
    // node-redis's sentinel has a sendCommand(isReadonly, args) of its own: refused, with the way round it
    const sentinel = createSentinel({ name: 'mymaster', sentinelRootNodes: [{ host: '127.0.0.1', port: 1 }] });
    assert.throws(() => new Throttle(sentinel), /a node-redis sentinel \(createSentinel\) is not supported: pass a function that sends through it/);
  });

  it('refuses an option the call or the client does not take, by name, before sending anything', async () => {
    const refused = [
      [() => throttle.fixed('k', 1, '1s', { burst: 5 }), /^redis-throttle: fixed\(\) does not support the option burst \(only token\(\) and leaky\(\) take a burst\); it takes cost, block, at, ban, renew, backoff, tally, force, banNow, detail$/],
      [() => throttle.fixed('k', 1, '1s', { exact: true }), /fixed\(\) does not support the option exact \(only sliding\(\) takes exact\)/],
      [() => throttle.sliding('k', 1, '1s', { burst: 5 }), /sliding\(\) does not support the option burst/],
      [() => throttle.sliding('k', 1, '1s', { exact: 'yes' }), /exact must be a boolean, got string/],
      [() => throttle.token('k', 1, '1s', { exact: true }), /token\(\) does not support the option exact/],
      [() => throttle.leaky('k', 1, '1s', { count: true }), /leaky\(\) does not support the option count; it takes cost, block, at, ban, renew, backoff, tally, force, banNow, detail, burst$/],
      [() => throttle.fixed('k', 1, '1s', { cost: 1, timeout: 5 }), /fixed\(\) does not support the option timeout/],
      [() => throttle.fixed('k', 1, '1s', 5), /fixed\(\) takes an options object, got number/],
      [() => throttle.call({ algorithm: 'sliding', key: 'k', limit: 1, period: 1, exact: true }), /a limit does not support the option exact \(give algorithm: 'sliding-exact'\)/],
      [() => throttle.call({ algorithm: 'fixed', key: 'k', limit: 1, period: 1, burst: 2 }), /burst is for the token and leaky algorithms only, not fixed/],
      [() => throttle.call({ algorithm: 'token', key: 'k', limit: 1, period: 1 }, { burst: 2 }), /call\(\) does not support the option burst \(burst is a field of the limit/],
      [() => throttle.call({ algorithm: 'fixed', limit: 1, period: 1 }), /key must be a string, got undefined/],
      [() => throttle.all([{ algorithm: 'fixed', key: 'k', limit: 1, period: 1 }], { block: 100 }), /all\(\) does not support the option block \(THROTTLE\.ALL answers at once, it does not block\); it takes cost, at, detail$/],
      [() => throttle.all([{ algorithm: 'fixed', key: 'k', limit: 1, period: 1, cost: 2 }]), /a limit does not support the option cost \(cost is an option of the call, not of a limit\)/],
      [() => throttle.all({ algorithm: 'fixed', key: 'k', limit: 1, period: 1 }), /all\(\) takes an array of limits/],
      [() => throttle.info('k', { cost: 0 }), /info\(\) does not support the option cost/],
      [() => throttle.fixed('k', 1, '1s', { renew: true }), /renew needs ban \(the ban's length\)/],
      [() => throttle.fixed('k', 1, '1s', { backoff: '1h' }), /backoff needs ban/],
      [() => throttle.fixed('k', 1, '1s', { banNow: true }), /banNow needs ban/],
      [() => throttle.fixed('k', 1, '1s', { ban: '1m', renew: true, backoff: '1h' }), /renew and backoff are two kinds of ban: give one of them/],
      [() => throttle.fixed('k', 1, '1s', { ban: '1 minute' }), /ban must be milliseconds or a period string/],
      [() => throttle.fixed('k', 1, '1s', { ban: 0 }), /ban must be a positive integer of milliseconds/],
      [() => throttle.fixed('k', 1, '1s', { tally: 1.5 }), /tally must be an integer/],
      [() => throttle.fixed('k', 1, '1s', { force: 1 }), /force must be a boolean, got number/],
      [() => throttle.fixed('k', 1, '1s', { detail: 'yes' }), /detail must be a boolean, got string/],
      [() => throttle.fixed('k', 1, '1s', { banFor: '1m' }), /fixed\(\) does not support the option banFor;/],
      [() => throttle.call({ algorithm: 'fixed', key: 'k', limit: 1, period: 1, ban: '1m' }, { ban: '2m' }), /ban given both in the limit and in the options/],
      [() => throttle.all([{ algorithm: 'fixed', key: 'k', limit: 1, period: 1 }], { force: true }), /all\(\) does not support the option force \(THROTTLE\.ALL does not take FORCE/],
      [() => throttle.all([{ algorithm: 'fixed', key: 'k', limit: 1, period: 1 }], { ban: '1m' }), /all\(\) does not support the option ban \(each limit takes its own ban/],
      [() => throttle.all([{ algorithm: 'fixed', key: 'k', limit: 1, period: 1, banNow: true }]), /a limit does not support the option banNow/],
      [() => throttle.reset(42), /key must be a string, got number/],
    ];
    for (const [call, message] of refused) await assert.rejects(call(), { name: 'TypeError', message });
    assert.equal(await server.command('EXISTS', 'args:k'), 0, 'nothing was sent');
    assert.throws(() => new Throttle(client, { keyPrefix: 'app:' }), {
      name: 'TypeError',
      message: /^redis-throttle: Throttle does not support the option keyPrefix \(give ioredis's keyPrefix to ioredis.*\); it takes prefix$/,
    });
    assert.throws(() => new Throttle(client, { prefix: 1 }), /prefix must be a string, got number/);
    // an option given as undefined is not given
    assert.equal((await throttle.fixed('k2', 1, '1s', { cost: undefined, burst: undefined })).allowed, true);
  });

  it('block: waits on the server until admitted (milliseconds or a period string)', async () => {
    // A bucket that refills once an hour: nothing but the refund below can
    // admit the waiters, so no test step depends on how fast time passes.
    const stats = async () => {
      const text = await server.command('INFO', 'throttle');
      return {
        blocked: Number(/throttle_token:.*\bblocked=(\d+)/.exec(text)[1]),
        waiting: Number(/throttle_waiting_clients:(\d+)/.exec(text)[1]),
      };
    };
    for (const block of ['1h', 3_600_000]) {
      await throttle.reset('wait');
      assert.equal((await throttle.token('wait', 1, '1h')).allowed, true);
      const refused = await throttle.token('wait', 1, '1h');
      assert.equal(refused.allowed, false);
      assert.ok(refused.retryAfter > 3_590_000);
      const before = await stats();
      const waiter = throttle.token('wait', 1, '1h', { block });
      await eventually(async () => (await stats()).waiting === before.waiting + 1, 30_000, 'the call waiting on the server');
      await server.command('THROTTLE.TOKEN', 'args:wait', '1', '1h', 'COST', '-1'); // a refund serves the waiter
      const admitted = await waiter;
      assert.equal(admitted.allowed, true);
      assert.equal((await stats()).blocked, before.blocked + 1, 'the call waited on the server once');
    }
  });

  it('a function that sends commands works as a client', async () => {
    const sent = [];
    const own = new Throttle((args, key) => {
      sent.push(key);
      return client.sendCommand(args);
    });
    assert.deepEqual(await own.fixed('fn', 2, '1s', { at: s(0) }), reply(1, 2, 1, 0, 1000));
    assert.deepEqual(sent, ['fn']);
  });

  it("applies ioredis's keyPrefix, which ioredis does not apply to module commands", async () => {
    const io = await singleClients['ioredis 6, RESP3 flat maps (its default)'](server);
    io.options.keyPrefix = 'app:';
    try {
      const prefixed = new Throttle(io, { prefix: 'rl:' });
      assert.equal((await prefixed.fixed('ken', 1, '1m')).allowed, true);
      assert.equal(await server.command('TYPE', 'app:rl:ken'), 'thr-fixed');
      assert.equal((await prefixed.info('ken')).algorithm, 'fixed');
      await prefixed.reset('ken');
      assert.equal(await server.command('EXISTS', 'app:rl:ken'), 0);
    } finally {
      close(io);
    }
  });
});

describe('a server without the module', () => {
  let bare;
  before(async () => {
    bare = await startServer({ module: false });
  });
  after(() => bare?.stop());

  for (const [name, connect] of Object.entries(singleClients)) {
    it(`${name}: the first call says the THROTTLE commands are missing and how to load the module`, async () => {
      const client = await connect(bare);
      try {
        const throttle = new Throttle(client);
        await assert.rejects(throttle.sliding('k', 1, '1s'), (error) => {
          assert.ok(error instanceof ThrottleModuleMissingError);
          assert.match(error.message, /no THROTTLE\.SLIDING command: the THROTTLE commands are missing/);
          assert.match(error.message, /loadmodule \/path\/to\/libredis_throttle\.so/);
          assert.match(error.message, /server said: ERR unknown command 'THROTTLE\.SLIDING'/);
          return true;
        });
        await assert.rejects(throttle.info('k'), ThrottleModuleMissingError);
        await assert.rejects(throttle.all([{ algorithm: 'fixed', key: 'k', limit: 1, period: 1 }]), ThrottleModuleMissingError);
      } finally {
        await close(client);
      }
    });
  }
});
