// Leases (THROTTLE.ACQUIRE, RELEASE, RENEW) through the Throttle client on
// every supported client, protocol and cluster, against a real server with
// the module. Values are exact with time driven by AT; the waits are woken
// by a release the test makes once the server reports the waiter, so no
// step depends on how fast time passes.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createClientPool as createClientPool5 } from 'redis-5';
import { createClientPool as createClientPool6 } from 'redis';
import { Lease, LeaseNotAcquiredError, Throttle, ThrottleModuleMissingError } from 'redis-throttle';
import { close, clusterClients, singleClients } from './clients.js';
import { eventually } from './support/http.js';
import { startCluster, startServer } from './support/redis.js';

const T0 = 1_700_000_000_000_000; // Unix µs
const s = (seconds) => T0 + seconds * 1_000_000;
const refused = (limit, retryAfter, resetAfter) => ({ allowed: false, limit, remaining: 0, retryAfter, resetAfter });
/** A lease's five fields and token, as a plain object. */
const fields = (lease) => ({ allowed: lease.allowed, limit: lease.limit, remaining: lease.remaining, retryAfter: lease.retryAfter, resetAfter: lease.resetAfter, token: lease.token });
// A key lives for its last lease's end in the server's real time, whatever
// AT says: every lease here is a minute or more, so that none ends between
// two calls of a test however slow the machine is.

/** INFO throttle: THROTTLE.ACQUIRE's counters and the clients waiting now. */
async function stats(server) {
  const text = await server.command('INFO', 'throttle');
  const line = /throttle_acquire:(.*)/.exec(text)?.[1] ?? '';
  const counters = Object.fromEntries(line.trim().split(',').filter(Boolean).map((kv) => kv.split('=')).map(([k, v]) => [k, Number(v)]));
  return { ...counters, waiting: Number(/throttle_waiting_clients:(\d+)/.exec(text)[1]) };
}

/** Resolves once the server has `n` more clients waiting than `before`. */
const queued = (server, before, n = 1) => eventually(async () => (await stats(server)).waiting === before.waiting + n, 30_000, `${n} waiter(s) on the server`);

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

    it('acquire, a refusal, renewals and releases at fixed times (AT)', async () => {
      const a = await throttle.acquire('api', 2, '1m', { id: 'a', at: s(0) });
      assert.ok(a instanceof Lease);
      assert.deepEqual(fields(a), { allowed: true, limit: 2, remaining: 1, retryAfter: 0, resetAfter: 60_000, token: 'a' });
      assert.equal(a.key, 'api');
      const b = await throttle.acquire('api', 2, 60_000, { at: s(1) });
      assert.match(b.token, /^[0-9a-f]{32}$/, 'a token the server made');
      assert.deepEqual({ ...fields(b), token: 'made' }, { allowed: true, limit: 2, remaining: 0, retryAfter: 0, resetAfter: 60_000, token: 'made' });
      // Full: a plain result, as every refused call of the package, with the time until a slot frees.
      const full = await throttle.acquire('api', 2, '1m', { id: 'c', at: s(2) });
      assert.deepEqual(full, refused(2, 58_000, 59_000));
      assert.equal(Object.getPrototypeOf(full), Object.prototype);
      // The same id again renews its own lease: no slot needed.
      assert.deepEqual(fields(await throttle.acquire('api', 2, '1m', { id: 'a', at: s(3) })), { allowed: true, limit: 2, remaining: 0, retryAfter: 0, resetAfter: 60_000, token: 'a' });
      // A token that holds nothing changes nothing.
      assert.equal(await throttle.release('api', 'c', { at: s(3) }), false);
      assert.equal(await throttle.renew('api', 'c', '5s', { at: s(3) }), false);
      assert.equal(await a.release({ at: s(4) }), true);
      assert.equal(await a.release({ at: s(4) }), false, 'released once');
      assert.equal(await b.renew('2m', { at: s(5) }), true);
      assert.deepEqual(await throttle.info('api', { at: s(5) }), {
        algorithm: 'lease', limit: 2, holders: 1, remaining: 1, updatedAt: s(5), resetAfter: 120_000,
        leases: [{ token: b.token, endsAt: s(125), endsAfter: 120_000 }],
      });
      assert.equal(await server.command('TYPE', `${p}api`), 'thr-lease');
      assert.equal(await throttle.renew('api', b.token, 90_000, { at: s(6) }), true);
      assert.equal(await throttle.release('api', b.token, { at: s(7) }), true);
      assert.equal(await server.command('EXISTS', `${p}api`), 0, 'the key goes with its last lease');
      assert.equal(await throttle.info('api'), null);
    });

    it("the server's errors come through as they are", async () => {
      await assert.rejects(throttle.acquire('e', 0, '1m'), { message: /^ERR invalid limit: expected the most holders, an integer from 1 to 100000/ });
      await throttle.fixed('rate', 1, '1m');
      await assert.rejects(throttle.acquire('rate', 1, '1m'), { message: /^WRONGTYPE/ });
      await assert.rejects(throttle.release('rate', 'x'), { message: /^WRONGTYPE/ });
    });

    it('isolated: the wait goes on a connection of its own, woken by a release', async () => {
      const holder = await throttle.acquire('w', 1, '1h', { id: 'holder' });
      assert.equal(holder.allowed, true);
      const before = await stats(server);
      const waiter = throttle.acquire('w', 1, '1h', { id: 'next', block: '1h', isolated: true });
      await queued(server, before);
      // The client's own connection is free meanwhile: it answers, and frees the slot.
      assert.equal((await throttle.info('w')).holders, 1);
      assert.equal(await holder.release(), true);
      const admitted = await waiter;
      assert.deepEqual(fields(admitted), { allowed: true, limit: 1, remaining: 0, retryAfter: 0, resetAfter: 3_600_000, token: 'next' });
      const after = await stats(server);
      assert.equal(after.blocked, before.blocked + 1, 'the call waited on the server once');
      assert.equal(after.waiting, before.waiting);
      assert.equal(await admitted.release(), true);
    });
  });
}

describe('waiting', () => {
  let client;
  let throttle;
  before(async () => {
    client = await singleClients['ioredis 6, RESP3 flat maps (its default)'](server);
    throttle = new Throttle(client, { prefix: 'wait:' });
  });
  after(() => client && close(client));

  for (const [name, connect] of [
    ['node-redis 6', singleClients['node-redis 6, RESP3 (its default)']],
    ['ioredis 6', singleClients['ioredis 6, RESP3 flat maps (its default)']],
  ]) {
    it(`${name}: without isolated, the wait holds the client's connection (a command after it waits in the server's buffer)`, async () => {
      const own = await connect(server);
      try {
        const send = typeof own.call === 'function' ? (...args) => own.call(...args) : (...args) => own.sendCommand(args);
        const id = String(await send('CLIENT', 'ID'));
        const shared = new Throttle(own, { prefix: 'wait:' });
        const key = `shared-${name}`;
        await shared.acquire(key, 1, '1h', { id: 'holder' });
        const before = await stats(server);
        const waiter = shared.acquire(key, 1, '1h', { id: 'next', block: '1h' });
        await queued(server, before);
        const info = shared.info(key);
        // The server has the INFO, unread behind the waiting ACQUIRE.
        await eventually(async () => {
          const line = await server.command('CLIENT', 'LIST', 'ID', id);
          return /\bflags=b\b/.test(line) && Number(/\bqbuf=(\d+)/.exec(line)[1]) > 0;
        }, 30_000, 'the INFO in the blocked connection\'s query buffer');
        await server.command('THROTTLE.RELEASE', `wait:${key}`, 'holder');
        const [admitted, seen] = await Promise.all([waiter, info]);
        assert.equal(admitted.token, 'next');
        assert.deepEqual(seen.leases.map((l) => l.token), ['next'], 'the INFO ran after the wait ended');
        await admitted.release();
      } finally {
        await close(own);
      }
    });
  }

  it('waiters are let in in arrival order', async () => {
    const holder = await throttle.acquire('fifo', 1, '1h', { id: 'holder' });
    const before = await stats(server);
    const waiters = [];
    for (const [i, id] of ['first', 'second', 'third'].entries()) {
      waiters.push(throttle.acquire('fifo', 1, '1h', { id, block: 0, isolated: true }));
      await queued(server, before, i + 1);
    }
    let current = holder;
    for (const [i, id] of ['first', 'second', 'third'].entries()) {
      assert.equal(await current.release(), true);
      current = await waiters[i];
      assert.equal(current.token, id);
    }
    await current.release();
    assert.equal(await server.command('EXISTS', 'wait:fifo'), 0);
  });

  it('a wait times out on the server with the refusal', async () => {
    await throttle.acquire('timeout', 1, '1h', { id: 'holder' });
    const before = await stats(server);
    const r = await throttle.acquire('timeout', 1, '1h', { block: 20, isolated: true });
    assert.equal(r.allowed, false);
    assert.ok(r.retryAfter > 3_500_000 && r.resetAfter === r.retryAfter, JSON.stringify(r));
    const after = await stats(server);
    assert.equal(after.timed_out, before.timed_out + 1, 'timed out on the server once');
    assert.equal(await throttle.release('timeout', 'holder'), true);
  });

  it('an aborted wait rejects with the reason and leaves no lease behind', async () => {
    const holder = await throttle.acquire('abort', 1, '1h', { id: 'holder' });
    const before = await stats(server);
    const controller = new AbortController();
    const waiter = throttle.acquire('abort', 1, '1h', { block: '1h', isolated: true, signal: controller.signal });
    await queued(server, before);
    const reason = new Error('the caller gave up');
    controller.abort(reason);
    await assert.rejects(waiter, (error) => error === reason);
    assert.equal((await stats(server)).waiting, before.waiting, 'the waiter is gone from the server');
    assert.equal(await holder.release(), true);
    assert.equal(await server.command('EXISTS', 'wait:abort'), 0, 'the slot went to nobody');
    // Aborted before it starts: nothing is sent.
    const calls = (await stats(server)).calls;
    await assert.rejects(throttle.acquire('abort', 1, '1h', { block: 10, isolated: true, signal: AbortSignal.abort(reason) }), (error) => error === reason);
    assert.equal((await stats(server)).calls, calls);
  });

  for (const [name, createPool] of [['node-redis 5 pool', createClientPool5], ['node-redis 6 pool', createClientPool6]]) {
    it(`${name}: isolated waits on one of the pool's clients`, async () => {
      const pool = createPool({ url: server.url });
      pool.on('error', () => {});
      await pool.connect();
      try {
        const pooled = new Throttle(pool, { prefix: 'pool:' });
        const holder = await pooled.acquire(name, 1, '1h');
        const before = await stats(server);
        const controller = new AbortController();
        const aborted = pooled.acquire(name, 1, '1h', { block: 0, isolated: true, signal: controller.signal });
        await queued(server, before);
        controller.abort();
        await assert.rejects(aborted, { name: 'AbortError' });
        const waiter = pooled.acquire(name, 1, '1h', { id: 'next', block: 0, isolated: true });
        await queued(server, before);
        assert.equal(await holder.release(), true);
        const admitted = await waiter;
        assert.equal(admitted.token, 'next');
        assert.equal(await admitted.release(), true);
        assert.equal(await server.command('EXISTS', `pool:${name}`), 0);
      } finally {
        await pool.close();
      }
    });
  }
});

describe('withLease', () => {
  let client;
  let throttle;
  before(async () => {
    client = await singleClients['node-redis 6, RESP3 (its default)'](server);
    throttle = new Throttle(client, { prefix: 'with:' });
  });
  after(() => client && close(client));

  it('runs the work holding a lease and releases it after', async () => {
    const value = await throttle.withLease('job', 2, '1m', async (lease) => {
      assert.ok(lease instanceof Lease);
      const info = await throttle.info('job');
      assert.deepEqual(info.leases.map((l) => l.token), [lease.token]);
      assert.equal(await lease.renew('2m'), true);
      return 42;
    });
    assert.equal(value, 42);
    assert.equal(await server.command('EXISTS', 'with:job'), 0, 'released');
  });

  it("releases when the work throws, and rejects with the work's error", async () => {
    const failure = new Error('the work failed');
    await assert.rejects(throttle.withLease('job', 2, '1m', () => { throw failure; }), (error) => error === failure);
    assert.equal(await server.command('EXISTS', 'with:job'), 0, 'released');
  });

  it('rejects with LeaseNotAcquiredError when no slot came in time, without running the work', async () => {
    await throttle.acquire('busy', 1, '1m', { id: 'holder', at: s(0) });
    let ran = false;
    await assert.rejects(throttle.withLease('busy', 1, '1m', () => (ran = true), { at: s(20) }), (error) => {
      assert.ok(error instanceof LeaseNotAcquiredError);
      assert.deepEqual(error.result, refused(1, 40_000, 40_000));
      assert.equal(error.retryAfter, 40_000);
      assert.equal(error.key, 'busy');
      assert.match(error.message, /^redis-throttle: no lease on "busy": all 1 slots are held \(no block was given, so the call did not wait\); a slot frees in 40000 ms/);
      return true;
    });
    await throttle.acquire('busy-now', 1, '1h', { id: 'holder' });
    await assert.rejects(throttle.withLease('busy-now', 1, '1h', () => (ran = true), { block: 10, isolated: true }), {
      name: 'LeaseNotAcquiredError',
      message: /after waiting 10 ms/,
    });
    assert.equal(ran, false);
  });

  it('waits for a slot with block, then runs', async () => {
    const holder = await throttle.acquire('queue', 1, '1h', { id: 'holder' });
    const before = await stats(server);
    const done = throttle.withLease('queue', 1, '1h', async (lease) => lease.token, { id: 'worker', block: '1h', isolated: true });
    await queued(server, before);
    await holder.release();
    assert.equal(await done, 'worker');
    assert.equal(await server.command('EXISTS', 'with:queue'), 0);
  });

  it('with at, acquires and releases at that time', async () => {
    const value = await throttle.withLease('at', 1, '1m', async () => (await throttle.info('at', { at: s(30) })).leases, { id: 'w', at: s(0) });
    assert.deepEqual(value, [{ token: 'w', endsAt: s(60), endsAfter: 30_000 }]);
    assert.equal(await server.command('EXISTS', 'with:at'), 0);
  });
});

describe('arguments', () => {
  let client;
  let throttle;
  before(async () => {
    client = await singleClients['ioredis 6, RESP3 flat maps (its default)'](server);
    throttle = new Throttle(client, { prefix: 'args:' });
  });
  after(() => client && close(client));

  it('refuses bad arguments and options by name, before sending anything', async () => {
    const controller = new AbortController();
    const cases = [
      [() => throttle.acquire('k', 1, '1m', { cost: 2 }), /^redis-throttle: acquire\(\) does not support the option cost \(a lease is one slot; THROTTLE\.ACQUIRE takes no COST\); it takes block, id, at, isolated, signal$/],
      [() => throttle.acquire('k', 1, '1m', { token: 'x' }), /acquire\(\) does not support the option token \(name the lease with id\)/],
      [() => throttle.acquire('k', 1, '1m', { id: 'x'.repeat(65) }), /^redis-throttle: id must be a token of 1 to 64 bytes, got 65 bytes$/],
      [() => throttle.acquire('k', 1, '1m', { id: '' }), /id must be a token of 1 to 64 bytes, got 0 bytes/],
      [() => throttle.acquire('k', 1, '1m', { id: 7 }), /id must be a string, got number/],
      [() => throttle.acquire('k', 1, 0), /lease must be a positive integer of milliseconds/],
      [() => throttle.acquire('k', 1.5, '1m'), /limit must be an integer/],
      [() => throttle.acquire('k', 1, '1m', { block: -1 }), /block must be a non-negative integer/],
      [() => throttle.acquire('k', 1, '1m', { isolated: 'yes' }), /isolated must be a boolean, got string/],
      [() => throttle.acquire('k', 1, '1m', { block: 10, signal: controller.signal }), /signal needs isolated: true/],
      [() => throttle.acquire('k', 1, '1m', { signal: {} }), /signal must be an AbortSignal/],
      [() => throttle.acquire(5, 1, '1m'), /key must be a string, got number/],
      [() => throttle.release('k', ''), /token must be a token of 1 to 64 bytes/],
      [() => throttle.release('k', 'x', { block: 1 }), /release\(\) does not support the option block; it takes at$/],
      [() => throttle.renew('k', 'x', '1m', { id: 'y' }), /renew\(\) does not support the option id; it takes at$/],
      [() => throttle.renew('k', 'x', '1 minute'), /lease must be milliseconds or a period string/],
      [() => throttle.withLease('k', 1, '1m', 'work'), /withLease\(\) takes the work as a function/],
      [() => throttle.withLease('k', 1, '1m', () => {}, { cost: 1 }), /withLease\(\) does not support the option cost/],
      [() => new Throttle((args) => client.call(...args)).acquire('k', 1, '1m', { block: 10, isolated: true }), /isolated needs a node-redis or ioredis client, cluster or pool/],
    ];
    for (const [call, message] of cases) await assert.rejects(call(), { name: 'TypeError', message });
    assert.equal(await server.command('EXISTS', 'args:k'), 0, 'nothing was sent');
  });

  it('a function that sends commands works as a client (without isolated)', async () => {
    const sent = [];
    const own = new Throttle((args, key) => {
      sent.push(key);
      return client.call(...args);
    });
    const lease = await own.acquire('fn', 1, '1m', { id: 'me', at: s(0) });
    assert.equal(lease.token, 'me');
    assert.equal(await lease.release({ at: s(1) }), true);
    assert.deepEqual(sent, ['fn', 'fn']);
  });
});

describe('a server without the module', () => {
  let bare;
  before(async () => {
    bare = await startServer({ module: false });
  });
  after(() => bare?.stop());

  for (const name of ['node-redis 6, RESP3 (its default)', 'ioredis 6, RESP3 flat maps (its default)', 'node-redis 4, RESP2']) {
    it(`${name}: the first lease call says the module is missing and how to load it`, async () => {
      const client = await singleClients[name](bare);
      try {
        const throttle = new Throttle(client);
        await assert.rejects(throttle.acquire('k', 1, '1m'), (error) => {
          assert.ok(error instanceof ThrottleModuleMissingError);
          assert.match(error.message, /no THROTTLE\.ACQUIRE command: the THROTTLE commands are missing/);
          assert.match(error.message, /loadmodule \/path\/to\/libredis_throttle\.so/);
          return true;
        });
        await assert.rejects(throttle.release('k', 't'), ThrottleModuleMissingError);
        await assert.rejects(throttle.renew('k', 't', '1m'), ThrottleModuleMissingError);
        await assert.rejects(throttle.withLease('k', 1, '1m', () => {}, { block: 10, isolated: true }), ThrottleModuleMissingError);
      } finally {
        await close(client);
      }
    });
  }
});

describe('a cluster of three nodes', () => {
  let cluster;
  before(async () => {
    cluster = await startCluster(3);
  });
  after(() => cluster?.stop());

  /** MOVED errors the nodes answered, from INFO errorstats. */
  async function movedCount() {
    let total = 0;
    for (const node of cluster.nodes) {
      const m = /errorstat_MOVED:count=(\d+)/.exec(await node.command('INFO', 'errorstats'));
      total += m ? Number(m[1]) : 0;
    }
    return total;
  }

  for (const [name, connect] of Object.entries(clusterClients)) {
    it(`${name}: each lease call goes to its key's node; an isolated wait is woken by a release`, async () => {
      const client = await connect(cluster);
      try {
        const p = `${name.replace(/\W+/g, '-')}:`;
        const throttle = new Throttle(client, { prefix: p });
        await throttle.info('warm-up'); // ioredis learns the slots on its first command
        const moved = await movedCount();
        for (let i = 0; i < 12; i++) {
          const key = `job:${i}`;
          const lease = await throttle.acquire(key, 1, '1m', { id: 'a', at: s(0) });
          assert.equal(lease.token, 'a');
          assert.deepEqual(await throttle.acquire(key, 1, '1m', { at: s(1) }), refused(1, 59_000, 59_000));
          assert.equal(await lease.renew('2m', { at: s(2) }), true);
          assert.equal(await lease.release({ at: s(3) }), true);
        }
        assert.equal(await movedCount(), moved, 'no command was redirected');
        // A wait on the node that serves the key, on a duplicate of the cluster client.
        const holder = await throttle.acquire('queue', 1, '1h', { id: 'holder' });
        const node = await ownerOf(cluster, `${p}queue`);
        const before = await stats(node);
        const waiter = throttle.acquire('queue', 1, '1h', { id: 'next', block: '1h', isolated: true });
        await queued(node, before);
        assert.equal(await holder.release(), true);
        assert.equal((await waiter).token, 'next');
        assert.equal(await throttle.release('queue', 'next'), true);
      } finally {
        await close(client);
      }
    });
  }
});

/** The node of `cluster` that serves `key`. */
async function ownerOf(cluster, key) {
  const slot = Number(await cluster.nodes[0].command('CLUSTER', 'KEYSLOT', key));
  const per = Math.ceil(16384 / cluster.nodes.length);
  return cluster.nodes[Math.floor(slot / per)];
}
