#!/usr/bin/env node
// make bench, the Node rows: express (express-rate-limit 8) and fastify
// (@fastify/rate-limit 11) with their usual Redis stores (rate-limit-redis;
// the plugin's own Redis store) and with redis-throttle's, side by side in
// one run against one redis-server with the module, on a free loopback port.
// Each app runs in a process of its own; a keep-alive load of CONCURRENCY
// connections, over 1000 client keys all under their limit, runs for
// SECONDS per round; the rounds alternate between the stores and the median
// of ROUNDS is kept. Reports requests per second, the CPU time per request
// of redis-server and of the app (from /proc), and the Redis commands per
// request (INFO commandstats, script-run commands included). Then the
// penalties: fastify with ban and with continueExceeding, and
// rate-limiter-flexible's consume with blockDuration (RateLimiterRedis
// against RateLimiterThrottle), where most requests are refused.
//
//   node bench/node.mjs path/to/libredis_throttle.so [bench/node.md]
//
// Installs clients/node/'s packages (npm ci) and builds the package when missing.
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const nodeDir = path.join(repo, 'clients', 'node');
const SECONDS = Number(process.env.BENCH_NODE_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_NODE_ROUNDS ?? 3);
const CONCURRENCY = 32;
const KEYS = 1000;

const CONFIGS = {
  'express:rate-limit-redis': { framework: 'express', store: 'rate-limit-redis 6 (EVALSHA)' },
  'express:redis-throttle': { framework: 'express', store: '**redis-throttle ExpressStore**' },
  'fastify:builtin': { framework: 'fastify', store: 'the plugin\'s Redis store (Lua via ioredis)' },
  'fastify:redis-throttle': { framework: 'fastify', store: '**redis-throttle createFastifyStore**' },
  // Penalties: PENALTY_LIMIT an hour per client key, so that most requests
  // are refused and the refused ones count (ban), restart the window
  // (continueExceeding) or start a block (blockDuration).
  'fastify-ban:builtin': { framework: 'fastify, ban: 10', store: "the plugin's Redis store", penalty: true },
  'fastify-ban:redis-throttle': { framework: 'fastify, ban: 10', store: '**createFastifyStore** (TALLY)', penalty: true },
  'fastify-ce:builtin': { framework: 'fastify, continueExceeding', store: "the plugin's Redis store", penalty: true },
  'fastify-ce:redis-throttle': { framework: 'fastify, continueExceeding', store: '**createFastifyStore** (BAN RENEW)', penalty: true },
  'rlf:redis': { framework: 'rate-limiter-flexible, blockDuration', store: 'RateLimiterRedis (Lua via ioredis)', penalty: true },
  'rlf:redis-throttle': { framework: 'rate-limiter-flexible, blockDuration', store: '**RateLimiterThrottle** (BAN)', penalty: true },
};
/** The penalty rows' limit per client key and hour. */
const PENALTY_LIMIT = 20;

/** The app process: `node bench/node.mjs serve <config> <redis port>`; prints its port when listening. */
async function serve(config, redisPort) {
  const { createRequire } = await import('node:module');
  const require = createRequire(path.join(nodeDir, 'package.json'));
  const throttle = require('redis-throttle');
  const keyOf = (headers) => headers['x-client'] ?? 'anon';
  const windowMs = 3_600_000;
  const limit = 1_000_000_000; // every request admitted: the cost of a decision, not of a refusal
  let server;
  if (config.startsWith('rlf')) {
    const Redis = require('ioredis');
    const redis = new Redis({ port: redisPort, host: '127.0.0.1' });
    const options = { storeClient: redis, points: PENALTY_LIMIT, duration: 3600, blockDuration: 600 };
    const limiter = config === 'rlf:redis'
      ? new (require('rate-limiter-flexible').RateLimiterRedis)({ ...options, keyPrefix: 'bench:rlf' })
      : new throttle.RateLimiterThrottle({ ...options, keyPrefix: 'bench:rlf-throttle' });
    server = http.createServer((req, res) => {
      limiter.consume(keyOf(req.headers)).then(
        () => res.end('ok'),
        (rejected) => {
          res.statusCode = rejected instanceof Error ? 500 : 429;
          res.end();
        },
      );
    });
  } else if (config.startsWith('express')) {
    const express = require('express');
    const { rateLimit } = require('express-rate-limit');
    const redis = await require('redis').createClient({ url: `redis://127.0.0.1:${redisPort}` }).connect();
    const sendCommand = (...args) => redis.sendCommand(args);
    const store = config === 'express:rate-limit-redis'
      ? new (require('rate-limit-redis').RedisStore)({ sendCommand, prefix: 'bench:rl:' })
      : new throttle.ExpressStore({ sendCommand, prefix: 'bench:throttle:' });
    const app = express();
    app.use(rateLimit({ windowMs, limit, store, keyGenerator: (req) => keyOf(req.headers), validate: false }));
    app.get('/', (_req, res) => res.send('ok'));
    server = http.createServer(app);
  } else {
    const Fastify = require('fastify');
    const Redis = require('ioredis');
    const redis = new Redis({ port: redisPort, host: '127.0.0.1' });
    const app = Fastify();
    const [kind, store] = config.split(':');
    const storeOptions = store === 'builtin'
      ? { redis, nameSpace: `bench:${kind}:` }
      : { store: throttle.createFastifyStore(redis, { prefix: `bench:throttle-${kind}:` }) };
    const penalty = kind === 'fastify-ban' ? { ban: 10 } : kind === 'fastify-ce' ? { continueExceeding: true } : {};
    const max = kind === 'fastify' ? limit : PENALTY_LIMIT;
    await app.register(require('@fastify/rate-limit'), { max, timeWindow: windowMs, keyGenerator: (req) => keyOf(req.headers), ...penalty, ...storeOptions });
    app.get('/', async () => 'ok');
    await app.ready();
    server = app.server;
  }
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  console.log(server.address().port);
}

/** utime + stime of a process, in µs. */
function cpuMicros(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1e6) / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }));
}

/** CONCURRENCY keep-alive connections asking GET / for `seconds`; resolves to { ok, other }. */
async function load(port, seconds, accepted = [200]) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const deadline = Date.now() + seconds * 1000;
  let ok = 0;
  let other = 0;
  let n = 0;
  const one = () => new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/', agent, headers: { 'x-client': String(n++ % KEYS) } }, (res) => {
      res.resume();
      res.on('end', () => {
        if (accepted.includes(res.statusCode)) ok++;
        else other++;
        resolve();
      });
    });
    req.on('error', reject);
  });
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (Date.now() < deadline) await one();
  }));
  agent.destroy();
  return { ok, other };
}

async function commandCalls(server) {
  const text = await server.command('INFO', 'commandstats');
  let calls = 0;
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) if (!/^(info|ping)$/.test(m[1])) calls += Number(m[2]);
  return calls;
}

async function measure(server, redisPid, config) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), 'serve', config, String(server.port)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const port = await new Promise((resolve, reject) => {
    child.stdout.once('data', (d) => resolve(Number(String(d).trim())));
    child.once('exit', (code) => reject(new Error(`${config} exited with ${code}`)));
  });
  try {
    const accepted = CONFIGS[config].penalty ? [200, 403, 429] : [200];
    await load(port, 1, accepted); // warm-up: connections, JIT, keys
    const before = { redis: cpuMicros(redisPid), app: cpuMicros(child.pid), calls: await commandCalls(server), t: process.hrtime.bigint() };
    const { ok, other } = await load(port, SECONDS, accepted);
    const elapsed = Number(process.hrtime.bigint() - before.t) / 1e9;
    const requests = ok + other;
    if (other > 0) throw new Error(`${config}: ${other} requests were not answered ${accepted.join(' or ')}`);
    return {
      rps: requests / elapsed,
      redisUs: (cpuMicros(redisPid) - before.redis) / requests,
      appUs: (cpuMicros(child.pid) - before.app) / requests,
      commands: (await commandCalls(server) - before.calls) / requests,
    };
  } finally {
    child.kill();
    await exited;
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const [module, out = path.join(repo, 'bench/node.md')] = process.argv.slice(2);
  if (!module || !existsSync(module)) throw new Error('usage: node bench/node.mjs path/to/libredis_throttle.so [out.md]');
  if (!existsSync(path.join(nodeDir, 'node_modules/.package-lock.json'))) {
    execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: nodeDir, stdio: 'inherit' });
  }
  if (!existsSync(path.join(nodeDir, 'dist/cjs/index.js'))) execFileSync('npm', ['run', 'build'], { cwd: nodeDir, stdio: 'inherit' });
  console.error('== node frameworks: express and fastify with their usual Redis stores and redis-throttle (bench/node.mjs)');
  process.env.THROTTLE_MODULE = path.resolve(module);
  const { startServer } = await import(path.join(nodeDir, 'test/support/redis.js'));
  const server = await startServer();
  const started = new Date();
  const load1 = readFileSync('/proc/loadavg', 'utf8').split(' ')[0];
  const results = Object.fromEntries(Object.keys(CONFIGS).map((c) => [c, []]));
  try {
    const redisPid = server.child.pid;
    for (let round = 1; round <= ROUNDS; round++) {
      for (const config of Object.keys(CONFIGS)) {
        const r = await measure(server, redisPid, config);
        results[config].push(r);
        console.error(`round ${round} ${config}: ${r.rps.toFixed(0)} req/s, redis ${r.redisUs.toFixed(1)} µs/req, app ${r.appUs.toFixed(0)} µs/req, ${r.commands.toFixed(2)} commands/req`);
      }
    }
  } finally {
    await server.stop();
  }
  const load2 = readFileSync('/proc/loadavg', 'utf8').split(' ')[0];
  const versions = Object.fromEntries(['express', 'express-rate-limit', 'rate-limit-redis', 'fastify', '@fastify/rate-limit', 'redis', 'ioredis', 'rate-limiter-flexible'].map((p) =>
    [p, JSON.parse(readFileSync(path.join(nodeDir, 'node_modules', p, 'package.json'), 'utf8')).version]));
  const redisVersion = execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).match(/v=(\S+)/)[1];
  const rows = [];
  for (const framework of [...new Set(Object.values(CONFIGS).map((c) => c.framework))]) {
    const configs = Object.keys(CONFIGS).filter((c) => CONFIGS[c].framework === framework);
    const [usual, ours] = configs.map((c) => ({
      rps: median(results[c].map((r) => r.rps)),
      redisUs: median(results[c].map((r) => r.redisUs)),
      appUs: median(results[c].map((r) => r.appUs)),
      commands: median(results[c].map((r) => r.commands)),
    }));
    for (const [c, m] of [[configs[0], usual], [configs[1], ours]]) {
      const ratio = c === configs[1] ? ` (${(m.rps / usual.rps).toFixed(2)}×)` : '';
      const redisRatio = c === configs[1] ? ` (${(m.redisUs / usual.redisUs).toFixed(2)}×)` : '';
      rows.push(`| ${framework} | ${CONFIGS[c].store} | ${m.rps.toFixed(0)}${ratio} | ${m.redisUs.toFixed(1)}${redisRatio} | ${m.appUs.toFixed(0)} | ${m.commands.toFixed(2)} |`);
    }
  }
  const table = [
    '| framework | store | requests/s | redis-server CPU µs/request | app CPU µs/request | Redis commands/request |',
    '|---|---|---:|---:|---:|---:|',
    ...rows,
  ].join('\n');
  const md = `# Node frameworks: the usual Redis stores and redis-throttle's

Written by \`make bench\` (\`bench/node.mjs\`), run started ${started.toISOString().slice(0, 16).replace('T', ' ')} UTC,
load ${load1}–${load2}, on Redis ${redisVersion} with the module, Node ${process.version}:
express ${versions.express} with express-rate-limit ${versions['express-rate-limit']}
(rate-limit-redis ${versions['rate-limit-redis']}, node-redis ${versions.redis}), fastify ${versions.fastify}
with @fastify/rate-limit ${versions['@fastify/rate-limit']} (ioredis ${versions.ioredis}),
rate-limiter-flexible ${versions['rate-limiter-flexible']} (ioredis ${versions.ioredis}) behind node:http.

Each app runs in its own process; ${CONCURRENCY} keep-alive connections over 1000 client
keys. The first two pairs admit every request (limit 10^9 an hour); the
penalty pairs allow ${PENALTY_LIMIT} an hour per key, so most requests are refused
(403 past max + 10 for ban; for continueExceeding each refusal restarts the
hour; blockDuration blocks a key for 10 minutes). ${SECONDS} s per round after a 1 s
warm-up, the stores alternating, median of ${ROUNDS} rounds. CPU time from /proc
(redis-server's and the app's, user + system); Redis commands from INFO commandstats,
which counts the commands a script runs too. The load generator shares the
machine's 2 cores with the app and the server: compare rows of one run only.

${table}
`;
  writeFileSync(out, md);
  console.log(`\nNode frameworks (${path.relative(repo, out)}):\n${table}`);
}

if (process.argv[2] === 'serve') {
  serve(process.argv[3], Number(process.argv[4])).catch((error) => {
    console.error(error);
    process.exit(1);
  });
} else {
  main().catch((error) => {
    console.error(error);
    process.exit(1);
  });
}
