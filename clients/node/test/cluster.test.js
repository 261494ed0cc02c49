// The Throttle client on a real Redis Cluster of three nodes on loopback,
// with every supported cluster client: each command goes straight to the node
// that serves its key (no MOVED redirection), THROTTLE.ALL with hash tags.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Throttle } from 'redis-throttle';
import { close, clusterClients } from './clients.js';
import { startCluster } from './support/redis.js';

const T0 = 1_700_000_000_000_000;

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

it('a command sent to the wrong node is counted as MOVED (what the tests below count)', async () => {
  const before = await movedCount();
  const wrong = [];
  for (const node of cluster.nodes) {
    try {
      await node.command('THROTTLE.FIXED', 'probe', '1', '1s');
    } catch (error) {
      wrong.push(error.message);
    }
  }
  assert.equal(wrong.length, 2);
  assert.match(wrong[0], /^MOVED \d+ 127\.0\.0\.1:\d+$/);
  assert.equal(await movedCount(), before + 2);
});

for (const [name, connect] of Object.entries(clusterClients)) {
  describe(name, () => {
    let client;
    let throttle;
    const p = `${name.replace(/\W+/g, '-')}:`;
    before(async () => {
      client = await connect(cluster);
      throttle = new Throttle(client, { prefix: p });
      await throttle.fixed('warm-up', 1, '1s'); // ioredis learns the slots on its first command
    });
    after(() => client && close(client));

    it('routes each call to the node that serves its key', async () => {
      const moved = await movedCount();
      const owners = new Set();
      for (let i = 0; i < 30; i++) {
        const key = `user:${i}`;
        assert.deepEqual(await throttle.fixed(key, 2, '1m', { at: T0 }), { allowed: true, limit: 2, remaining: 1, retryAfter: 0, resetAfter: 60000 });
        assert.deepEqual(await throttle.fixed(key, 2, '1m', { cost: 2, at: T0 }), { allowed: false, limit: 2, remaining: 1, retryAfter: 60000, resetAfter: 60000 });
        assert.equal((await throttle.info(key)).used, 1);
        const slot = Number(await cluster.nodes[0].command('CLUSTER', 'KEYSLOT', p + key));
        owners.add(Math.floor(slot / Math.ceil(16384 / 3)));
      }
      assert.equal(owners.size, 3, 'the keys spread over all three nodes');
      assert.equal(await movedCount(), moved, 'no command was redirected');
    });

    it('all: keys that share a hash tag', async () => {
      const limits = [
        { algorithm: 'sliding', key: '{user:7}:s', limit: 10, period: '1s' },
        { algorithm: 'token', key: '{user:7}:h', limit: 1000, period: '1h', burst: 5 },
      ];
      assert.deepEqual(await throttle.all(limits, { at: T0 }), {
        allowed: true,
        results: [
          { allowed: true, limit: 10, remaining: 9, retryAfter: 0, resetAfter: 2000 },
          { allowed: true, limit: 5, remaining: 4, retryAfter: 0, resetAfter: 3600 },
        ],
      });
    });

    it('all: keys in different slots get CROSSSLOT', async () => {
      const limits = [
        { algorithm: 'fixed', key: 'a', limit: 1, period: '1s' },
        { algorithm: 'fixed', key: 'b', limit: 1, period: '1s' },
      ];
      await assert.rejects(throttle.all(limits), /CROSSSLOT/);
    });
  });
}
