// Every client the package supports type-checks where a client is taken
// (test/types.test.js compiles this file and expects no error).
import { createClient as createClient4, createCluster as createCluster4 } from 'redis-4';
import { createClient as createClient5, createCluster as createCluster5, createClientPool as createClientPool5 } from 'redis-5';
import { createClient as createClient6, createCluster as createCluster6, createClientPool as createClientPool6 } from 'redis';
import { Redis as Redis5, Cluster as Cluster5 } from 'ioredis-5';
import { Redis as Redis6, Cluster as Cluster6 } from 'ioredis';
import { Throttle, ExpressStore, createFastifyStore, NestStorage, Semaphore, Lease, type AcquireResult, type RedisClientLike, type ThrottleResult } from 'redis-throttle';

const clients = [
  createClient4(),
  createCluster4({ rootNodes: [] }),
  createClient5(),
  createClient5({ RESP: 3 }),
  createCluster5({ rootNodes: [] }),
  createClientPool5(),
  createClient6(),
  createClient6({ RESP: 2 }),
  createCluster6({ rootNodes: [] }),
  createClientPool6(),
  new Redis5(),
  new Cluster5([]),
  new Redis6(),
  new Cluster6([]),
] as const;

for (const client of clients) {
  const throttle = new Throttle(client, { prefix: 'p:' });
  const r: Promise<ThrottleResult> = throttle.fixed('k', 1, '1s', { cost: 1, at: 1n, block: 10 });
  void r;
  new ExpressStore({ client, algorithm: 'sliding', clock: () => 0n });
  createFastifyStore(client, { algorithm: 'token', prefix: 'f:', clock: () => 0 });
  new NestStorage(client, { algorithm: 'fixed' });
  const asType: RedisClientLike = client;
  void asType;
  new Semaphore(client, 'k', 3, { lockTimeout: 30_000, acquireTimeout: 10_000, retryInterval: 10, refreshInterval: 0, identifier: 'w', acquiredExternally: true, onLockLost() {} });
}

// Leases: a Lease when allowed, the plain refusal otherwise (narrowed by allowed).
async function leases(throttle: Throttle): Promise<number> {
  const r: AcquireResult = await throttle.acquire('k', 3, '30s', { block: 1000, id: 'w', isolated: true, signal: AbortSignal.timeout(10) });
  if (r.allowed) {
    const lease: Lease = r;
    const released: boolean = await lease.release();
    const renewed: boolean = await r.renew(30_000, { at: 1n });
    void [released, renewed, lease.token];
  } else {
    const wait: number = r.retryAfter;
    void wait;
  }
  const n: number = await throttle.withLease('k', 3, '30s', async (lease) => lease.remaining, { block: '10s' });
  const semaphore = new Semaphore(createClient6(), 'k', 3);
  const held: boolean = await semaphore.tryAcquire();
  await semaphore.acquire(AbortSignal.timeout(10));
  const still: boolean = (await semaphore.refresh()) && semaphore.isAcquired;
  await semaphore.release();
  void [held, still, semaphore.identifier];
  return n + (await throttle.release('k', 'w') ? 1 : 0) + (await throttle.renew('k', 'w', '1m') ? 1 : 0);
}
void leases;

// A function that sends a command is a client too.
new Throttle((args: string[], key: string) => createClient6().sendCommand(args).then((reply) => [reply, key]));
