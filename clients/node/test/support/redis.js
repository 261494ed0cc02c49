// Real redis-server processes for the tests: the freshly built module on a
// free loopback port (never 6379), in a temporary directory of their own,
// stopped with SHUTDOWN NOSAVE and then by their process handle. Clusters are
// real cluster nodes on loopback.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { createClient } from 'redis';

const here = path.dirname(fileURLToPath(import.meta.url));

/** The module under test: THROTTLE_MODULE (make test-node sets it), else the release build of this checkout. */
export const MODULE = process.env.THROTTLE_MODULE || path.resolve(here, '../../../../target/release/libredis_throttle.so');
const SERVER = process.env.THROTTLE_REDIS_SERVER || 'redis-server';

/** A port the kernel just handed out on 127.0.0.1, never 6379. */
export async function freePort() {
  for (;;) {
    const port = await new Promise((resolve, reject) => {
      const s = net.createServer();
      s.once('error', reject);
      s.listen(0, '127.0.0.1', () => {
        const { port } = s.address();
        s.close(() => resolve(port));
      });
    });
    if (port !== 6379) return port;
  }
}

/** Resolves to whether a server on `port` answers PING with PONG. */
function ping(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    let data = '';
    const done = (ok) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.on('error', () => done(false));
    socket.on('connect', () => socket.write('*1\r\n$4\r\nPING\r\n'));
    socket.on('data', (chunk) => {
      data += chunk;
      if (data.includes('\r\n')) done(data.startsWith('+PONG'));
    });
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The servers this process started and has not stopped. A test process
 * stopped before its after() hooks (Ctrl-C, or the test runner cancelling
 * it) kills them by their handles and removes their directories, so that
 * no server outlives its tests.
 */
const live = new Set();
function killLive() {
  for (const server of live) {
    server.child.kill('SIGKILL');
    rmSync(server.dir, { recursive: true, force: true });
  }
  live.clear();
}
process.once('exit', killLive);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    killLive();
    process.exit(128 + ({ SIGINT: 2, SIGTERM: 15, SIGHUP: 1 })[signal]);
  });
}

/**
 * Starts a redis-server. `module: false` starts one without the module;
 * `args` are further options (`['--cluster-enabled', 'yes']`).
 */
export async function startServer({ module = true, args = [] } = {}) {
  if (module && !existsSync(MODULE)) {
    throw new Error(`no module at ${MODULE}: run make build, or set THROTTLE_MODULE`);
  }
  const dir = mkdtempSync(path.join(tmpdir(), 'throttle-node-'));
  for (let attempt = 1; ; attempt++) {
    // Another process can take the port between the probe and the bind.
    const port = await freePort();
    const child = spawn(
      SERVER,
      [
        '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
        '--dir', dir, '--logfile', path.join(dir, 'redis.log'),
        ...(module ? ['--loadmodule', MODULE] : []),
        ...args,
      ],
      { stdio: 'ignore' },
    );
    let exited = false;
    const exit = new Promise((resolve) => child.once('exit', () => resolve((exited = true))));
    // A guard against a server that never answers, not a measure of speed.
    const deadline = Date.now() + 30_000;
    while (!exited && Date.now() < deadline) {
      if (await ping(port)) return new Server(port, dir, child, exit);
      await sleep(20);
    }
    child.kill('SIGKILL');
    await exit;
    if (attempt === 5) {
      const log = existsSync(path.join(dir, 'redis.log')) ? readFileSync(path.join(dir, 'redis.log'), 'utf8') : '';
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`redis-server did not start:\n${log}`);
    }
  }
}

export class Server {
  constructor(port, dir, child, exit) {
    this.port = port;
    this.url = `redis://127.0.0.1:${port}`;
    this.dir = dir;
    this.child = child;
    this.exit = exit;
    live.add(this);
  }

  /** A RESP2 node-redis connection for checks outside the code under test; close it with .close() (v5+) or .quit(). */
  async admin() {
    return createClient({ url: this.url, RESP: 2 }).on('error', () => {}).connect();
  }

  /** One command on the server's own admin connection (opened on first use): `await server.command('TYPE', 'k')`. */
  async command(...args) {
    this.connection ??= this.admin().catch((error) => {
      this.connection = undefined;
      throw error;
    });
    return (await this.connection).sendCommand(args.map(String));
  }

  async stop() {
    live.delete(this);
    try {
      await this.command('SHUTDOWN', 'NOSAVE');
    } catch {
      // the connection closes as the server exits
    }
    // No reconnection to a server that is gone.
    await this.connection?.then((c) => c.destroy(), () => {});
    this.connection = undefined;
    const killed = await Promise.race([this.exit.then(() => false), sleep(5000).then(() => true)]);
    if (killed) {
      this.child.kill('SIGKILL');
      await this.exit;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A real Redis Cluster of `size` masters on loopback, each serving a third (or so) of the slots. */
export async function startCluster(size = 3) {
  const nodes = [];
  try {
    for (let i = 0; i < size; i++) {
      nodes.push(await startServer({
        args: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-announce-ip', '127.0.0.1'],
      }));
    }
    const per = Math.ceil(16384 / size);
    for (const [i, node] of nodes.entries()) {
      await node.command('CLUSTER', 'ADDSLOTSRANGE', i * per, Math.min(16383, (i + 1) * per - 1));
      if (i > 0) await node.command('CLUSTER', 'MEET', '127.0.0.1', nodes[0].port);
    }
    const deadline = Date.now() + 60_000; // a guard, not a measure of speed
    for (const node of nodes) {
      for (;;) {
        const info = await node.command('CLUSTER', 'INFO');
        if (info.includes('cluster_state:ok') && info.includes(`cluster_known_nodes:${size}`)) break;
        if (Date.now() > deadline) throw new Error(`the cluster did not reach cluster_state:ok:\n${info}`);
        await sleep(50);
      }
    }
  } catch (error) {
    await Promise.all(nodes.map((n) => n.stop()));
    throw error;
  }
  return {
    nodes,
    rootNodes: nodes.map((n) => ({ url: n.url })),
    ioredisNodes: nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
    stop: () => Promise.all(nodes.map((n) => n.stop())),
  };
}

/** `INFO commandstats` of a server as { 'throttle.fixed': { calls, rejected_calls, ... } }. */
export async function commandStats(server) {
  const text = await server.command('INFO', 'commandstats');
  const stats = {};
  for (const line of text.split('\r\n')) {
    const m = /^cmdstat_([^:]+):(.*)$/.exec(line);
    if (!m) continue;
    stats[m[1]] = Object.fromEntries(m[2].split(',').map((kv) => kv.split('=')).map(([k, v]) => [k, Number(v)]));
  }
  return stats;
}

/**
 * Before a test file's tests: a server with the module, and a node-redis and
 * an ioredis client on it, handed to `use` as { server, nodeRedis, ioredis };
 * after them, the clients closed and the server stopped.
 */
export function serverWithClients(use) {
  let started;
  before(async () => {
    const server = await startServer();
    const nodeRedis = await createClient({ url: server.url }).connect();
    started = { server, nodeRedis, ioredis: new Redis({ port: server.port, host: '127.0.0.1' }) };
    use(started);
  });
  after(async () => {
    await started?.nodeRedis.close();
    started?.ioredis.disconnect();
    await started?.server.stop();
  });
}
