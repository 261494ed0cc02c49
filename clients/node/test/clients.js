// Every client the package supports, connected to a test server: node-redis 4,
// 5 and 6 and ioredis 5 and 6 (npm aliases redis-4, redis-5, ioredis-5), in
// each protocol and reply shape they offer.
import { createClient as createClient4, createCluster as createCluster4 } from 'redis-4';
import { createClient as createClient5, createCluster as createCluster5 } from 'redis-5';
import { createClient as createClient6, createCluster as createCluster6 } from 'redis';
import { Redis as Redis5, Cluster as Cluster5 } from 'ioredis-5';
import { Redis as Redis6, Cluster as Cluster6 } from 'ioredis';

const quiet = (c) => c.on('error', () => {});

/** name -> (server) => connected client. */
export const singleClients = {
  'node-redis 4, RESP2': (s) => quiet(createClient4({ url: s.url })).connect(),
  'node-redis 5, RESP2': (s) => quiet(createClient5({ url: s.url })).connect(),
  'node-redis 5, RESP3': (s) => quiet(createClient5({ url: s.url, RESP: 3 })).connect(),
  'node-redis 6, RESP3 (its default)': (s) => quiet(createClient6({ url: s.url })).connect(),
  'node-redis 6, RESP2': (s) => quiet(createClient6({ url: s.url, RESP: 2 })).connect(),
  'ioredis 5, RESP2': (s) => quiet(new Redis5({ port: s.port, host: '127.0.0.1' })),
  'ioredis 6, RESP3 flat maps (its default)': (s) => quiet(new Redis6({ port: s.port, host: '127.0.0.1' })),
  'ioredis 6, RESP3 replyMapping resp3': (s) => quiet(new Redis6({ port: s.port, host: '127.0.0.1', replyMapping: 'resp3' })),
  'ioredis 6, RESP2': (s) => quiet(new Redis6({ port: s.port, host: '127.0.0.1', protocol: 2 })),
};

/** name -> (cluster from startCluster) => connected cluster client. */
export const clusterClients = {
  'node-redis 4 cluster': async (c) => {
    const cluster = quiet(createCluster4({ rootNodes: c.rootNodes }));
    await cluster.connect(); // resolves to nothing in v4
    return cluster;
  },
  'node-redis 5 cluster, RESP3': (c) => quiet(createCluster5({ rootNodes: c.rootNodes, RESP: 3 })).connect(),
  'node-redis 6 cluster': (c) => quiet(createCluster6({ rootNodes: c.rootNodes })).connect(),
  'ioredis 5 Cluster': (c) => quiet(new Cluster5(c.ioredisNodes)),
  'ioredis 6 Cluster': (c) => quiet(new Cluster6(c.ioredisNodes)),
};

/** Closes any of them. */
export async function close(client) {
  if (typeof client.call === 'function') client.disconnect();
  else if (typeof client.close === 'function') await client.close();
  else await client.disconnect();
}
