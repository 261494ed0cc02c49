// The Semaphore (redis-semaphore's API on the lease commands) against a real
// server with the module, on ioredis and node-redis. Its refresh timer and
// clock are node:test's mock timers, moved by the test, so each refresh is
// counted exactly; waits are woken by a release the test makes once the
// server reports the waiter. redis-semaphore's own tests run in
// redis-semaphore-suite.test.js.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { LostLockError, Semaphore, ThrottleModuleMissingError, TimeoutError, defaultTimeoutOptions } from 'redis-throttle';
import { close, singleClients } from './clients.js';
import { performance } from 'node:perf_hooks';
import { startServer } from './support/redis.js';

/**
 * Polls `probe` until it returns something truthy, failing after `ms`: the
 * deadline on performance.now(), which the mock timers leave alone.
 */
async function eventually(probe, ms = 10_000, what = 'the condition') {
  const deadline = performance.now() + ms;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (performance.now() > deadline) throw new Error(`${what} did not hold within ${ms} ms`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** INFO throttle: counters of THROTTLE.ACQUIRE and RENEW, and the clients waiting now. */
async function stats(server) {
  const text = await server.command('INFO', 'throttle');
  const counters = (command) => {
    const line = new RegExp(`throttle_${command}:(.*)`).exec(text)?.[1] ?? '';
    const counters = { calls: 0, admitted: 0, limited: 0, blocked: 0, timed_out: 0 }; // before the first call the line is missing
    for (const [k, v] of line.trim().split(',').filter(Boolean).map((kv) => kv.split('='))) counters[k] = Number(v);
    return counters;
  };
  return { acquire: counters('acquire'), renew: counters('renew'), waiting: Number(/throttle_waiting_clients:(\d+)/.exec(text)[1]) };
}
/** Resolves once `semaphore`'s refresh under way, if any, has ended (a tick of the mock timers starts one). */
const refreshed = (semaphore) => eventually(() => !semaphore._refreshing, 10_000, 'the refresh to end');
const queued = (server, before, n = 1) => eventually(async () => (await stats(server)).waiting === before.waiting + n, 30_000, `${n} waiter(s) on the server`);
const holders = async (server, key) => {
  const info = await server.command('THROTTLE.INFO', `semaphore:${key}`);
  if (info === null) return [];
  const leases = info[info.indexOf('leases') + 1];
  return leases.map(([token]) => token).sort();
};

let server;
before(async () => {
  server = await startServer();
});
after(() => server?.stop());

const CLIENTS = ['ioredis 6, RESP3 flat maps (its default)', 'ioredis 5, RESP2', 'node-redis 6, RESP3 (its default)', 'node-redis 4, RESP2'];

for (const name of CLIENTS) {
  describe(name, () => {
    let client;
    const k = (key) => `${name.replace(/\W+/g, '-')}:${key}`;
    before(async () => {
      client = await singleClients[name](server);
    });
    after(() => client && close(client));

    it('holds at most limit slots; a waiter waits on the server, not on the client, and gets the slot a release frees', async () => {
      const key = k('limit');
      const [a, b] = [new Semaphore(client, key, 2), new Semaphore(client, key, 2)];
      assert.equal(a.isAcquired, false);
      await a.acquire();
      assert.equal(await b.tryAcquire(), true);
      assert.equal(a.isAcquired && b.isAcquired, true);
      assert.deepEqual(await holders(server, key), [a.identifier, b.identifier].sort());
      assert.equal(await server.command('TYPE', `semaphore:${key}`), 'thr-lease');
      assert.equal(await new Semaphore(client, key, 2, { acquireAttemptsLimit: 1 }).tryAcquire(), false, 'one attempt: no wait');
      const before = await stats(server);
      const c = new Semaphore(client, key, 2, { acquireTimeout: 3_600_000 });
      const waiting = c.acquire();
      await queued(server, before);
      assert.equal(c.isAcquired, false);
      // The client is free meanwhile: the release goes on it.
      await a.release();
      assert.equal(a.isAcquired, false);
      await waiting;
      assert.equal(c.isAcquired, true);
      assert.deepEqual(await holders(server, key), [b.identifier, c.identifier].sort());
      const after = await stats(server);
      assert.equal(after.acquire.blocked, before.acquire.blocked + 1, 'waited on the server once');
      await b.release();
      await c.release();
      assert.equal(await server.command('EXISTS', `semaphore:${key}`), 0, 'the key goes with its last holder');
    });

    it('acquire() rejects with TimeoutError when no slot comes within acquireTimeout', async () => {
      const key = k('timeout');
      const holder = new Semaphore(client, key, 1, { refreshInterval: 0 });
      await holder.acquire();
      const before = await stats(server);
      const late = new Semaphore(client, key, 1, { acquireTimeout: 20 });
      await assert.rejects(late.acquire(), (error) => {
        assert.ok(error instanceof TimeoutError);
        assert.equal(error.message, `Acquire semaphore semaphore:${key} timeout`);
        return true;
      });
      assert.equal((await stats(server)).acquire.timed_out, before.acquire.timed_out + 1, 'timed out on the server');
      assert.equal(late.isAcquired, false);
      await holder.release();
    });

    it('acquire(signal): an aborted wait rejects with the reason and leaves no lease behind', async () => {
      const key = k('abort');
      const holder = new Semaphore(client, key, 1);
      await holder.acquire();
      const before = await stats(server);
      const controller = new AbortController();
      const waiter = new Semaphore(client, key, 1, { acquireTimeout: 3_600_000 });
      const waiting = waiter.acquire(controller.signal);
      await queued(server, before);
      controller.abort(new Error('shutting down'));
      await assert.rejects(waiting, { message: 'shutting down' });
      assert.equal((await stats(server)).waiting, before.waiting);
      await holder.release();
      assert.equal(await server.command('EXISTS', `semaphore:${key}`), 0, 'the aborted waiter holds nothing');
    });
  });
}

describe('refresh, loss and options (ioredis 6)', () => {
  let client;
  before(async () => {
    client = await singleClients['ioredis 6, RESP3 flat maps (its default)'](server);
  });
  after(() => client && close(client));

  it('refreshes every refreshInterval with THROTTLE.RENEW until stopRefresh() or release()', async (t) => {
    t.mock.timers.enable({ apis: ['setInterval', 'Date'], now: Date.now() });
    const s = new Semaphore(client, 'refresh', 1, { lockTimeout: 60_000, refreshInterval: 1000 });
    await s.acquire();
    const renews = async () => (await stats(server)).renew.admitted;
    const start = await renews();
    for (let i = 1; i <= 3; i++) {
      t.mock.timers.tick(1000);
      await refreshed(s);
      assert.equal(await renews(), start + i, `refresh ${i}`);
    }
    s.stopRefresh();
    t.mock.timers.tick(5000);
    await client.ping(); // anything the timer sent is answered before this
    assert.equal(await renews(), start + 3, 'no refresh after stopRefresh()');
    assert.equal(s.isAcquired, true);
    await s.release();
    assert.equal(await server.command('EXISTS', 'semaphore:refresh'), 0);
  });

  for (const [how, lose] of [
    ['its key is deleted', () => server.command('DEL', 'semaphore:lost')],
    ['its key is replaced by another type', () => server.command('SET', 'semaphore:lost', 'x')],
  ]) {
    it(`calls onLockLost with a LostLockError when a refresh finds the slot gone (${how})`, async (t) => {
      t.mock.timers.enable({ apis: ['setInterval', 'Date'], now: Date.now() });
      const lost = [];
      const s = new Semaphore(client, 'lost', 1, {
        lockTimeout: 60_000,
        refreshInterval: 1000,
        onLockLost(error) {
          lost.push({ self: this, error, acquired: this.isAcquired });
        },
      });
      await s.acquire();
      await lose();
      t.mock.timers.tick(1000);
      await refreshed(s);
      assert.equal(lost.length, 1, 'onLockLost was called');
      assert.equal(lost[0].self, s);
      assert.ok(lost[0].error instanceof LostLockError);
      assert.equal(lost[0].error.message, 'Lost semaphore for key semaphore:lost');
      assert.equal(lost[0].acquired, false);
      t.mock.timers.tick(5000);
      await client.ping();
      assert.equal(lost.length, 1, 'the refresh stopped');
      await s.release(); // safe: nothing held
      await server.command('DEL', 'semaphore:lost');
    });
  }

  it('a refresh that gets no answer is tried again, and the slot counts as lost once lockTimeout has passed', async (t) => {
    t.mock.timers.enable({ apis: ['setInterval', 'Date'], now: Date.now() });
    let failing = false;
    let tries = 0;
    const down = new Error('connection lost');
    const send = (args) => {
      if (args[0] === 'THROTTLE.RENEW') tries++;
      return failing && args[0] === 'THROTTLE.RENEW' ? Promise.reject(down) : client.call(...args);
    };
    const lost = [];
    const s = new Semaphore(send, 'flaky', 1, { lockTimeout: 10_000, refreshInterval: 4000, onLockLost: (error) => lost.push(error) });
    await s.acquire();
    failing = true;
    t.mock.timers.tick(4000); // 4 s after the acquisition: the lease still runs
    await refreshed(s);
    t.mock.timers.tick(4000); // 8 s
    await refreshed(s);
    assert.equal(tries, 2, 'tried at each interval');
    assert.deepEqual(lost, []);
    assert.equal(s.isAcquired, true);
    t.mock.timers.tick(4000); // 12 s: the lease has ended whatever the server did
    await refreshed(s);
    assert.equal(tries, 3);
    assert.equal(lost.length, 1);
    assert.ok(lost[0] instanceof LostLockError);
    assert.equal(lost[0].cause, down);
    assert.equal(s.isAcquired, false);
    failing = false;
    await s.release();
  });

  it('refresh() renews at once and says whether the slot was still held', async () => {
    const s = new Semaphore(client, 'manual', 1, { refreshInterval: 0 });
    await s.acquire();
    const before = await stats(server);
    assert.equal(await s.refresh(), true);
    assert.equal((await stats(server)).renew.admitted, before.renew.admitted + 1);
    await server.command('DEL', 'semaphore:manual');
    assert.equal(await s.refresh(), false);
    assert.equal(s.isAcquired, false);
  });

  it('acquiredExternally: renews the lease another holder took, with its identifier', async () => {
    const scheduler = new Semaphore(client, 'shared', 3, { refreshInterval: 0 });
    await scheduler.acquire();
    const handler = new Semaphore(client, 'shared', 3, { identifier: scheduler.identifier, acquiredExternally: true });
    const before = await stats(server);
    await handler.acquire();
    assert.equal((await stats(server)).renew.admitted, before.renew.admitted + 1, 'a renewal, not a second slot');
    assert.deepEqual(await holders(server, 'shared'), [scheduler.identifier]);
    await handler.release();
    assert.equal(await server.command('EXISTS', 'semaphore:shared'), 0);
    const gone = new Semaphore(client, 'shared', 3, { identifier: scheduler.identifier, acquiredExternally: true });
    await assert.rejects(gone.acquire(), TimeoutError);
    // the deprecated form
    const old = new Semaphore(client, 'shared', 3, { externallyAcquiredIdentifier: 'x' });
    assert.equal(old.identifier, 'x');
  });

  it('identifiers: a UUID by default, or the one given (with a suffix, as redis-semaphore)', () => {
    assert.match(new Semaphore(client, 'id', 1).identifier, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(new Semaphore(client, 'id', 1, { identifier: 'worker-7' }).identifier, 'worker-7');
    assert.match(new Semaphore(client, 'id', 1, { identifierSuffix: 'w7' }).identifier, /^[0-9a-f-]{36}-w7$/);
    assert.deepEqual(defaultTimeoutOptions, { lockTimeout: 10000, acquireTimeout: 10000, acquireAttemptsLimit: Number.POSITIVE_INFINITY, retryInterval: 10 });
  });

  it('refuses bad arguments and options by name', () => {
    const cases = [
      [() => new Semaphore(null, 'k', 1), /"client" is required/],
      [() => new Semaphore(client, '', 1), /"key" is required/],
      [() => new Semaphore(client, 1, 1), /"key" must be a string/],
      [() => new Semaphore(client, 'k', 0), /"limit" is required/],
      [() => new Semaphore(client, 'k', '1'), /"limit" must be a number/],
      [() => new Semaphore(client, 'k', 100001), /"limit" must be an integer from 1 to 100000, got 100001/],
      [() => new Semaphore(client, 'k', 1, { prefix: 'x' }), /^redis-throttle: Semaphore does not support the option prefix \(the key is semaphore:<key>/],
      [() => new Semaphore(client, 'k', 1, { lockTimout: 5 }), /Semaphore does not support the option lockTimout; it takes lockTimeout, acquireTimeout/],
      [() => new Semaphore(client, 'k', 1, { lockTimeout: 0 }), /lockTimeout must be an integer of milliseconds from 1, got 0/],
      [() => new Semaphore(client, 'k', 1, { lockTimeout: 1.5 }), /lockTimeout must be an integer of milliseconds/],
      [() => new Semaphore(client, 'k', 1, { acquireTimeout: -1 }), /acquireTimeout must be an integer of milliseconds from 0 \(or Infinity\)/],
      [() => new Semaphore(client, 'k', 1, { refreshInterval: -1 }), /refreshInterval must be an integer of milliseconds from 0/],
      [() => new Semaphore(client, 'k', 1, { acquireAttemptsLimit: 0 }), /acquireAttemptsLimit must be a positive integer or Infinity/],
      [() => new Semaphore(client, 'k', 1, { retryInterval: 'x' }), /retryInterval must be a number of milliseconds \(it is unused: nothing polls\)/],
      [() => new Semaphore(client, 'k', 1, { identifier: 'x'.repeat(65) }), /identifier must be a token of 1 to 64 bytes, got 65 bytes/],
      [() => new Semaphore(client, 'k', 1, { identifier: '' }), /identifier must be a token of 1 to 64 bytes, got 0 bytes/],
      [() => new Semaphore(client, 'k', 1, { acquiredExternally: true }), /acquiredExternally: true needs the identifier/],
      [() => new Semaphore(client, 'k', 1, { onLockLost: 'log' }), /onLockLost must be a function, got string/],
      [() => new Semaphore({}, 'k', 1), /expected a node-redis client or cluster/],
    ];
    for (const [make, message] of cases) assert.throws(make, { name: 'TypeError', message });
    // accepted and unused
    assert.equal(new Semaphore(client, 'k', 1, { retryInterval: 100 }).isAcquired, false);
  });
});

describe('a server without the module', () => {
  let bare;
  before(async () => {
    bare = await startServer({ module: false });
  });
  after(() => bare?.stop());

  it('acquire() says the module is missing and how to load it', async () => {
    const client = await singleClients['ioredis 6, RESP3 flat maps (its default)'](bare);
    try {
      await assert.rejects(new Semaphore(client, 'k', 1).acquire(), (error) => {
        assert.ok(error instanceof ThrottleModuleMissingError);
        assert.match(error.message, /no THROTTLE\.ACQUIRE command/);
        return true;
      });
    } finally {
      await close(client);
    }
  });
});
