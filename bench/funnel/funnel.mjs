#!/usr/bin/env node
// make bench, the funnel: a concurrency limit of SLOTS slots that CLIENTS
// clients contend for, each holding its slot HOLD_MS, measured for three
// implementations side by side in one run against one redis-server with the
// module (a free loopback port; stopped by its child handle):
//
//   native     THROTTLE.ACQUIRE funnel 4 10s BLOCK 0, then THROTTLE.RELEASE:
//              the waiters queue on the server and are let in by a release.
//   laravel    Laravel's Illuminate\Redis\Limiters\ConcurrencyLimiter
//              (Redis::funnel()), transcribed: its lock and release Lua
//              byte for byte, sent with EVAL as it sends them, its key
//              layout (name1..nameN), its block() loop that retries every
//              250 ms.
//   semaphore  redis-semaphore's Semaphore with its default options (it
//              retries every retryInterval ms).
//
// Every client has a connection of its own (a blocked call holds its
// connection; a PHP worker or a Node process has its own too). Two loads:
//
//   steady     each client asks, holds, releases, thinks THINK_MS, asks
//              again; ROUNDS rounds alternating between the
//              implementations, each WARMUP s, then SECONDS s measured.
//   burst      the clients ask at once and each takes the slot once; one
//              burst to warm up, then BURSTS measured. Nobody comes back,
//              so every handover goes to a client already waiting.
//
// Reported, over the measured time:
//
//   handover   from one holder's release to the next holder's start, in the
//              clients (one process, one monotonic clock): the k-th release
//              (the instant its holder is done, before the release is sent)
//              frees the slot that the (k + SLOTS)-th acquisition takes, so
//              handover k = acquired[k + SLOTS] - released[k], both sorted.
//              With waiters always queued, this is the time a freed slot
//              stands empty.
//   server CPU INFO cpu (used_cpu_user + used_cpu_sys) over the window,
//              per acquisition in it.
//   commands   INFO commandstats calls over the window (a script's own
//              calls counted, INFO itself not), per acquisition; round
//              trips: the commands the clients sent, per acquisition.
//
// In the steady load a client that has released thinks THINK_MS before it
// asks again, as a worker takes its next job: asking again at once, a
// polling client finds the slot it just freed before any sleeper wakes, and
// keeps it. Even so, with polling a freed slot mostly goes to a client
// coming back; the burst shows what a waiter waits.
//
//   node bench/funnel/funnel.mjs path/to/libredis_throttle.so [bench/funnel.md]
//
// Environment: BENCH_FUNNEL_SERVER (default redis-server), BENCH_FUNNEL_SECONDS
// (6), BENCH_FUNNEL_ROUNDS (3), BENCH_FUNNEL_BURSTS (5), BENCH_FUNNEL_THINK_MS
// (5). Installs its packages (npm ci) when missing.
// It reports the claim's ratios and exits 0 whatever they are; it fails only
// when something does not work (an implementation lets more than SLOTS in,
// leaves keys behind, or a command fails).
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import { cpus, tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const SERVER = process.env.BENCH_FUNNEL_SERVER || 'redis-server';
const SECONDS = Number(process.env.BENCH_FUNNEL_SECONDS ?? 6);
const ROUNDS = Number(process.env.BENCH_FUNNEL_ROUNDS ?? 3);
const WARMUP = 1;
const SLOTS = 4;
const CLIENTS = 32;
const HOLD_MS = 5;
const THINK_MS = Number(process.env.BENCH_FUNNEL_THINK_MS ?? 5);
const LEASE_S = 10;
const BURSTS = Number(process.env.BENCH_FUNNEL_BURSTS ?? 5);
/** Laravel's block() timeout in seconds: long enough never to end a wait here (Redis::funnel()'s default is 3). */
const LARAVEL_TIMEOUT_S = 60;

// ---------------------------------------------------------------------------
// Laravel's ConcurrencyLimiter, transcribed from laravel/framework v8.83.26
// (src/Illuminate/Redis/Limiters/ConcurrencyLimiter.php). The two scripts
// are its lockScript() and releaseScript() heredocs, byte for byte (a PHP
// nowdoc has no final newline); main() checks them against an installed
// Laravel's source when one is there.
// ---------------------------------------------------------------------------

const LARAVEL_LOCK_SCRIPT = `for index, value in pairs(redis.call('mget', unpack(KEYS))) do
    if not value then
        redis.call('set', KEYS[index], ARGV[3], "EX", ARGV[2])
        return ARGV[1]..index
    end
end`;

const LARAVEL_RELEASE_SCRIPT = `if redis.call('get', KEYS[1]) == ARGV[1]
then
    return redis.call('del', KEYS[1])
else
    return 0
end`;

class LimiterTimeoutException extends Error {}

/** Str::random($length): random_bytes, base64, without '/', '+' and '='. */
function strRandom(length) {
  let string = '';
  while (string.length < length) {
    const size = length - string.length;
    string += randomBytes(size).toString('base64').replace(/[/+=]/g, '').slice(0, size);
  }
  return string;
}

/** PHP's time(): whole seconds. */
const time = () => Math.floor(Date.now() / 1000);

class ConcurrencyLimiter {
  /** `redis` is a counting wrapper: `eval(script, numkeys, ...args)`. */
  constructor(redis, name, maxLocks, releaseAfter) {
    this.name = name;
    this.redis = redis;
    this.maxLocks = maxLocks;
    this.releaseAfter = releaseAfter;
  }

  async block(timeout, callback = null, sleepMs = 250) {
    const starting = time();
    const id = strRandom(20);
    let slot;
    while (!(slot = await this.acquire(id))) {
      if (time() - timeout >= starting) throw new LimiterTimeoutException();
      await sleep(sleepMs); // usleep($sleep * 1000)
    }
    if (typeof callback === 'function') {
      let result;
      try {
        result = await callback();
      } catch (exception) {
        await this.release(slot, id);
        throw exception;
      }
      await this.release(slot, id); // tap($callback(), fn () => $this->release($slot, $id))
      return result;
    }
    return true;
  }

  acquire(id) {
    const slots = Array.from({ length: this.maxLocks }, (_, i) => this.name + (i + 1));
    return this.redis.eval(LARAVEL_LOCK_SCRIPT, slots.length, ...slots, this.name, this.releaseAfter, id);
  }

  release(key, id) {
    return this.redis.eval(LARAVEL_RELEASE_SCRIPT, 1, key, id);
  }
}

// ---------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------

/** A port the kernel just handed out on 127.0.0.1, never 6379. */
async function freePort() {
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

/** redis-server with the module on a free loopback port, in a directory of its own. */
async function startServer(module) {
  const dir = mkdtempSync(path.join(tmpdir(), 'throttle-funnel-'));
  for (let attempt = 1; ; attempt++) {
    const port = await freePort(); // another process can take it before the bind: try again
    const child = spawn(SERVER, [
      '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', dir, '--logfile', path.join(dir, 'redis.log'), '--loadmodule', module,
    ], { stdio: 'ignore' });
    let exited = false;
    const exit = new Promise((resolve) => child.once('exit', () => resolve((exited = true))));
    const deadline = Date.now() + 10_000;
    while (!exited && Date.now() < deadline) {
      if (await ping(port)) return { port, dir, child, exit };
      await sleep(20);
    }
    child.kill('SIGKILL');
    await exit;
    if (attempt === 5) {
      const log = existsSync(path.join(dir, 'redis.log')) ? readFileSync(path.join(dir, 'redis.log'), 'utf8') : '';
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`${SERVER} did not start:\n${log}`);
    }
  }
}

async function stopServer(server, admin) {
  try {
    await admin.call('SHUTDOWN', 'NOSAVE');
  } catch {
    // the connection closes as the server exits
  }
  admin.disconnect();
  const killed = await Promise.race([server.exit.then(() => false), sleep(5000).then(() => true)]);
  if (killed) {
    server.child.kill('SIGKILL');
    await server.exit;
  }
  rmSync(server.dir, { recursive: true, force: true });
}

// ---------------------------------------------------------------------------
// Measuring
// ---------------------------------------------------------------------------

const now = () => Number(process.hrtime.bigint()) / 1e6; // ms, monotonic

function parseInfo(text) {
  const fields = {};
  for (const line of text.split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) fields[line.slice(0, i)] = line.slice(i + 1);
  }
  return fields;
}

/** Server CPU (µs) and commands run so far, INFO's own calls left out. */
async function serverCounters(admin) {
  const cpu = parseInfo(await admin.info('cpu'));
  let commands = 0;
  for (const m of (await admin.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (m[1] !== 'info') commands += Number(m[2]);
  }
  return { cpuUs: (Number(cpu.used_cpu_user) + Number(cpu.used_cpu_sys)) * 1e6, commands };
}

/** ioredis's options for every connection: one attempt, no reconnecting (a lost connection fails the run). */
const connectionOptions = (port) => ({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });

const percentile = (sorted, q) => sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)];

/** The handovers of one stretch of acquisitions that starts with every slot free: acquired[k + SLOTS] - released[k]. */
function handoversOf(segment, keep = () => true) {
  const acquired = [...segment.acquired].sort((a, b) => a - b);
  const released = [...segment.released].sort((a, b) => a - b);
  if (acquired.length !== released.length) throw new Error(`${acquired.length} acquisitions, ${released.length} releases`);
  const handovers = [];
  for (let k = 0; k + SLOTS < acquired.length; k++) {
    if (keep(acquired[k + SLOTS])) handovers.push(acquired[k + SLOTS] - released[k]);
  }
  return handovers;
}

/**
 * CLIENTS connections of their own for one implementation, what they send
 * counted, and hold(), which records a holder's start and end; `body` gets
 * { runs, hold, win } and drives them. Checks afterwards that no more than
 * SLOTS held a slot at once, no connection failed, and no key is left.
 */
async function session(Redis, port, admin, impl, body) {
  const win = { open: false, start: Infinity, end: Infinity, roundTrips: 0 };
  const waits = []; // ms from asking to holding, acquisitions in the window
  const perClient = new Array(CLIENTS).fill(0);
  let holders = 0;
  let maxHolders = 0;
  const errors = [];
  const connections = await Promise.all(Array.from({ length: CLIENTS }, async () => {
    const c = new Redis(connectionOptions(port));
    c.on('error', (error) => errors.push(error));
    await c.connect();
    return c;
  }));
  // What the clients send goes through here, so that it can be counted:
  // every method call on the connection sends one command.
  const counted = (c) => new Proxy(c, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (typeof value !== 'function') return value;
      return (...args) => {
        if (win.open) win.roundTrips++;
        return value.apply(target, args);
      };
    },
  });
  /** Client `client` holds a slot HOLD_MS; `segment` collects the instants. */
  const hold = async (segment, client, asked) => {
    const t = now();
    segment.acquired.push(t);
    if (t >= win.start && t < win.end) {
      waits.push(t - asked);
      perClient[client]++;
    }
    holders++;
    maxHolders = Math.max(maxHolders, holders);
    await sleep(HOLD_MS);
    holders--;
    segment.released.push(now());
  };
  try {
    const runs = connections.map((c, i) => impl.client(counted(c), i));
    // A failed client closes every connection, so that no waiter waits on.
    const abort = () => connections.forEach((c) => c.disconnect());
    const result = await body({ runs, hold, win, abort });
    if (errors.length) throw new Error(`${impl.name}: a connection failed: ${errors[0].message}`);
    if (maxHolders > SLOTS) throw new Error(`${impl.name}: ${maxHolders} clients held a slot at once, more than ${SLOTS}`);
    const left = await impl.leftover(admin);
    if (left) throw new Error(`${impl.name}: keys left behind after every client released: ${left}`);
    return { ...result, waits, perClient, roundTrips: win.roundTrips };
  } finally {
    for (const c of connections) c.disconnect();
  }
}

/** Opens the measured window: the server's counters now. */
async function openWindow(win, admin) {
  win.start = now();
  win.open = true;
  return serverCounters(admin);
}

/** Closes it: the server's counters now, less `before`. */
async function closeWindow(win, admin, before) {
  win.end = now();
  win.open = false;
  const after = await serverCounters(admin);
  return { seconds: (win.end - win.start) / 1000, cpuUs: after.cpuUs - before.cpuUs, commands: after.commands - before.commands };
}

/**
 * Steady: the clients loop (ask, hold, release, think) for WARMUP s, then
 * SECONDS s measured; then they stop asking, and the ones waiting get their
 * turn and leave.
 */
function steady(Redis, port, admin, impl) {
  return session(Redis, port, admin, impl, async ({ runs, hold, win, abort }) => {
    const segment = { acquired: [], released: [] };
    let stopping = false;
    let failed = null;
    const clients = runs.map(async (run, i) => {
      while (!stopping) {
        await run((asked) => hold(segment, i, asked));
        await sleep(THINK_MS);
      }
    }).map((client) => client.catch((error) => {
      // Held until the round ends, so that the server is still stopped.
      if (!failed) abort();
      failed ??= error;
      stopping = true;
    }));
    let measured;
    try {
      await sleep(WARMUP * 1000);
      const before = await openWindow(win, admin);
      await sleep(SECONDS * 1000);
      measured = await closeWindow(win, admin, before);
    } finally {
      stopping = true;
      await Promise.all(clients);
    }
    if (failed) throw failed;
    const inWindow = (t) => t >= win.start && t < win.end;
    return { ...measured, acquisitions: segment.acquired.filter(inWindow).length, handovers: handoversOf(segment, inWindow) };
  });
}

/**
 * Burst: the clients ask at once, each takes the slot once, and the burst
 * is over when the last has released; one burst to warm up, then BURSTS
 * measured. Every handover goes to a client that was already waiting.
 */
function burst(Redis, port, admin, impl) {
  return session(Redis, port, admin, impl, async ({ runs, hold, win }) => {
    const once = async () => {
      const segment = { acquired: [], released: [] };
      const t = now();
      await Promise.all(runs.map((run, i) => run((asked) => hold(segment, i, asked))));
      return { segment, ms: now() - t };
    };
    await once();
    const before = await openWindow(win, admin);
    const bursts = [];
    for (let b = 0; b < BURSTS; b++) bursts.push(await once());
    const measured = await closeWindow(win, admin, before);
    return {
      ...measured,
      acquisitions: BURSTS * CLIENTS,
      handovers: bursts.flatMap((b) => handoversOf(b.segment)),
      burstMs: bursts.map((b) => b.ms),
    };
  });
}

// ---------------------------------------------------------------------------
// The three implementations: client(redis, i) gives the client's loop body,
// run(hold), which acquires, awaits hold(askedAt), releases.
// ---------------------------------------------------------------------------

/**
 * The token of an admitted THROTTLE.ACQUIRE reply, else undefined: RESP2's
 * six fields, or RESP3's map (which ioredis 6, speaking RESP3, hands over
 * as a flat list of names and values).
 */
function admittedToken(reply) {
  if (!Array.isArray(reply)) return undefined;
  if (reply.length === 6 && reply[0] === 1) return reply[5];
  const map = Object.fromEntries(Array.from({ length: reply.length / 2 }, (_, j) => [String(reply[2 * j]), reply[2 * j + 1]]));
  return map.allowed === 1 || map.allowed === true ? map.token : undefined;
}

function implementations(Semaphore) {
  return [
    {
      name: 'native',
      label: '**native**: `THROTTLE.ACQUIRE funnel 4 10s BLOCK 0`, `THROTTLE.RELEASE`',
      client: (redis) => async (hold) => {
        const asked = now();
        const reply = await redis.call('THROTTLE.ACQUIRE', 'funnel', String(SLOTS), `${LEASE_S}s`, 'BLOCK', '0');
        const token = admittedToken(reply);
        if (token === undefined) throw new Error(`THROTTLE.ACQUIRE ... BLOCK 0 did not admit: ${JSON.stringify(reply)}`);
        await hold(asked);
        if ((await redis.call('THROTTLE.RELEASE', 'funnel', token)) !== 1) throw new Error('THROTTLE.RELEASE answered 0');
      },
      leftover: async (admin) => ((await admin.exists('funnel')) ? 'funnel' : ''),
    },
    {
      name: 'laravel',
      label: 'Laravel `ConcurrencyLimiter` (Lua via `EVAL`, retry every 250 ms)',
      client: (redis) => {
        const limiter = new ConcurrencyLimiter(redis, 'funnel:laravel', SLOTS, LEASE_S);
        return async (hold) => {
          const asked = now();
          await limiter.block(LARAVEL_TIMEOUT_S, () => hold(asked));
        };
      },
      leftover: async (admin) => (await admin.keys('funnel:laravel*')).join(' '),
    },
    {
      name: 'semaphore',
      label: 'redis-semaphore `Semaphore`, default options',
      client: (redis) => async (hold) => {
        const asked = now();
        const semaphore = new Semaphore(redis, 'funnel', SLOTS);
        await semaphore.acquire();
        try {
          await hold(asked);
        } finally {
          await semaphore.release();
        }
      },
      leftover: async (admin) => ((await admin.zcard('semaphore:funnel')) ? 'semaphore:funnel' : ''),
    },
  ];
}

/** The lock and release scripts of an installed Laravel, when there is one: { version, lock, release }. */
function installedLaravel() {
  const roots = [process.env.BENCH_LARAVEL_SRC, '/usr/share/php/Illuminate'].filter(Boolean);
  for (const root of roots) {
    const file = path.join(root, 'Redis', 'Limiters', 'ConcurrencyLimiter.php');
    if (!existsSync(file)) continue;
    const php = readFileSync(file, 'utf8');
    const nowdoc = (fn) => new RegExp(`function ${fn}\\(\\)[\\s\\S]*?<<<'LUA'\\n([\\s\\S]*?)\\n\\s*LUA;`).exec(php)?.[1];
    const app = path.join(root, 'Foundation', 'Application.php');
    const version = existsSync(app) ? /const VERSION = '([^']+)'/.exec(readFileSync(app, 'utf8'))?.[1] : undefined;
    return { version: version ?? 'unknown', lock: nowdoc('lockScript'), release: nowdoc('releaseScript') };
  }
  return null;
}

const fmt = (x, digits) => (Number.isFinite(x) ? x.toFixed(digits) : 'n/a');

async function main() {
  const [moduleArg, out = path.join(repo, 'bench', 'funnel.md')] = process.argv.slice(2);
  if (!moduleArg || !existsSync(moduleArg)) throw new Error('usage: node bench/funnel/funnel.mjs path/to/libredis_throttle.so [out.md]');
  const module = path.resolve(moduleArg);
  if (!existsSync(path.join(here, 'node_modules', '.package-lock.json'))) {
    execFileSync('npm', ['ci', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: here, stdio: 'inherit' });
  }
  const require = createRequire(path.join(here, 'package.json'));
  const { Redis } = require('ioredis');
  const { Semaphore, defaultTimeoutOptions } = require('redis-semaphore');
  const version = (p) => JSON.parse(readFileSync(path.join(here, 'node_modules', p, 'package.json'), 'utf8')).version;

  const laravel = installedLaravel();
  if (laravel && (laravel.lock !== LARAVEL_LOCK_SCRIPT || laravel.release !== LARAVEL_RELEASE_SCRIPT)) {
    throw new Error(`the installed Laravel ${laravel.version}'s lock or release script differs from the one transcribed here`);
  }

  const impls = implementations(Semaphore);
  const started = new Date();
  const loadStart = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
  console.error(`== funnel: ${SLOTS} slots, ${CLIENTS} clients holding ${HOLD_MS} ms; native, Laravel's ConcurrencyLimiter, redis-semaphore (bench/funnel/funnel.mjs)`);
  const server = await startServer(module);
  // Whatever happens, no server is left behind.
  process.once('exit', () => server.child.kill('SIGKILL'));
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.once(signal, () => {
      server.child.kill('SIGKILL');
      rmSync(server.dir, { recursive: true, force: true });
      process.exit(1);
    });
  }
  const admin = new Redis(connectionOptions(server.port));
  admin.on('error', () => {}); // SHUTDOWN closes it; any other failure fails its command
  const steadyResults = Object.fromEntries(impls.map((i) => [i.name, []]));
  const burstResults = Object.fromEntries(impls.map((i) => [i.name, []]));
  const line = (what, res) => {
    const h = [...res.handovers].sort((a, b) => a - b);
    console.error(`${what}: ${res.acquisitions} acquisitions (${fmt(res.acquisitions / res.seconds, 0)}/s), handover p50 ${fmt(percentile(h, 0.5), 3)} ms p99 ${fmt(percentile(h, 0.99), 3)} ms, `
      + `server CPU ${fmt(res.cpuUs / res.acquisitions, 1)} µs/acq, ${fmt(res.commands / res.acquisitions, 2)} commands/acq`);
  };
  let serverVersion;
  let moduleVersion;
  let idleCpuPerS;
  try {
    await admin.connect();
    serverVersion = parseInfo(await admin.info('server')).redis_version;
    const modules = await admin.call('MODULE', 'LIST');
    const throttle = modules.map((m) => Object.fromEntries(Array.from({ length: m.length / 2 }, (_, j) => [String(m[2 * j]), m[2 * j + 1]])))
      .find((m) => m.name === 'throttle');
    if (!throttle) throw new Error(`the module is not loaded: MODULE LIST answered ${JSON.stringify(modules)}`);
    moduleVersion = throttle.ver;
    const idleBefore = await serverCounters(admin);
    const idleT = now();
    await sleep(1000);
    const idleAfter = await serverCounters(admin);
    idleCpuPerS = (idleAfter.cpuUs - idleBefore.cpuUs) / ((now() - idleT) / 1000);
    for (let r = 1; r <= ROUNDS; r++) {
      for (const impl of impls) {
        const res = await steady(Redis, server.port, admin, impl);
        steadyResults[impl.name].push(res);
        line(`steady, round ${r}, ${impl.name}`, res);
      }
    }
    for (const impl of impls) {
      const res = await burst(Redis, server.port, admin, impl);
      burstResults[impl.name].push(res);
      line(`burst, ${impl.name}`, res);
    }
  } finally {
    await stopServer(server, admin);
  }
  const loadEnd = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

  const summarize = (rs) => {
    const sum = (f) => rs.reduce((a, r) => a + f(r), 0);
    const acquisitions = sum((r) => r.acquisitions);
    const handovers = rs.flatMap((r) => r.handovers).sort((a, b) => a - b);
    const waits = rs.flatMap((r) => r.waits).sort((a, b) => a - b);
    const perClient = rs.flatMap((r) => r.perClient);
    const burstMs = rs.flatMap((r) => r.burstMs ?? []).sort((a, b) => a - b);
    return {
      rate: acquisitions / sum((r) => r.seconds),
      p50: percentile(handovers, 0.5),
      p99: percentile(handovers, 0.99),
      samples: handovers.length,
      cpuUs: sum((r) => r.cpuUs) / acquisitions,
      cpuNetUs: (sum((r) => r.cpuUs) - idleCpuPerS * sum((r) => r.seconds)) / acquisitions,
      commands: sum((r) => r.commands) / acquisitions,
      roundTrips: sum((r) => r.roundTrips) / acquisitions,
      waitP50: percentile(waits, 0.5),
      waitP99: percentile(waits, 0.99),
      waitMax: waits[waits.length - 1],
      perClientMin: Math.min(...perClient),
      perClientMax: Math.max(...perClient),
      burstMs: percentile(burstMs, 0.5),
    };
  };
  const steadySummary = Object.fromEntries(impls.map((i) => [i.name, summarize(steadyResults[i.name])]));
  const burstSummary = Object.fromEntries(impls.map((i) => [i.name, summarize(burstResults[i.name])]));

  const table = (summary, extra = null) => [
    `| implementation | handover p50 ms | handover p99 ms | server CPU µs/acquisition | commands/acquisition | round trips/acquisition | acquisitions/s |${extra ? ` ${extra.title} |` : ''}`,
    `|---|---:|---:|---:|---:|---:|---:|${extra ? '---:|' : ''}`,
    ...impls.map((impl) => {
      const s = summary[impl.name];
      return `| ${impl.label} | ${fmt(s.p50, 3)} | ${fmt(s.p99, 3)} | ${fmt(s.cpuUs, 1)} | ${fmt(s.commands, 2)} | ${fmt(s.roundTrips, 2)} | ${fmt(s.rate, 0)} |${extra ? ` ${extra.cell(s)} |` : ''}`;
    }),
  ].join('\n');
  const ratios = (summary) => impls.filter((i) => i.name !== 'native').map((impl) => {
    const native = summary.native;
    const s = summary[impl.name];
    const faster = s.p50 / native.p50;
    const cpu = native.cpuUs / s.cpuUs;
    const holds = faster >= 10 && cpu <= 1;
    return `- against ${impl.name}: handover p50 ${fmt(faster, 1)}× faster (p99 ${fmt(s.p99 / native.p99, 1)}×), `
      + `server CPU per acquisition ${fmt(cpu, 2)}× theirs (${fmt(native.cpuNetUs / s.cpuNetUs, 2)}× less the idle server's), commands per acquisition ${fmt(native.commands / s.commands, 2)}× theirs: `
      + `the claim (at least 10× faster, at no more CPU) ${holds ? 'holds' : 'does not hold'} here`;
  }).join('\n');
  const steadyTable = table(steadySummary);
  const burstTable = table(burstSummary, { title: `a burst done in, ms (median)`, cell: (s) => fmt(s.burstMs, 0) });
  const fairness = [
    '| implementation | wait p50 ms | wait p99 ms | longest wait ms | acquisitions per client and round, fewest–most |',
    '|---|---:|---:|---:|---:|',
    ...impls.map((impl) => {
      const s = steadySummary[impl.name];
      return `| ${impl.name} | ${fmt(s.waitP50, 1)} | ${fmt(s.waitP99, 1)} | ${fmt(s.waitMax, 1)} | ${s.perClientMin}–${s.perClientMax} |`;
    }),
  ].join('\n');

  let commit = '';
  try {
    commit = execFileSync('git', ['-C', repo, 'describe', '--always', '--dirty'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    // not a git checkout
  }
  const moduleBuild = `MODULE LIST version ${moduleVersion}${commit ? `, built from commit ${commit}` : ''}`;
  const cpuModel = cpus()[0]?.model?.trim() ?? 'unknown CPU';
  const laravelCheck = laravel
    ? `checked byte-identical in this run against the installed Laravel ${laravel.version}'s`
    : 'not checked in this run (no installed Laravel found)';
  const md = `# The funnel: native leases against polling

Written by \`make bench\` (\`bench/funnel/funnel.mjs\`), run started
${started.toISOString().slice(0, 16).replace('T', ' ')} UTC on ${cpuModel} (\`nproc\` = ${cpus().length}),
load average ${loadStart} at the start and ${loadEnd} at the end; Redis ${serverVersion}
(\`${path.basename(SERVER)}\`) with the module (${moduleBuild}),
Node ${process.version}, ioredis ${version('ioredis')}.

A funnel of ${SLOTS} slots and ${CLIENTS} clients, each on its own connection, all in
one Node process, each holding its slot ${HOLD_MS} ms, three ways on the same server:

- **native**: \`THROTTLE.ACQUIRE funnel ${SLOTS} ${LEASE_S}s BLOCK 0\`, then \`THROTTLE.RELEASE funnel <token>\`:
  the waiters queue on the server and a release lets the first in.
- **Laravel**: \`Illuminate\\Redis\\Limiters\\ConcurrencyLimiter\` (what \`Redis::funnel()\` runs),
  transcribed to Node from laravel/framework v8.83.26: \`block()\` tries its \`lockScript()\`
  (\`MGET\` over the slots \`funnel:laravel1\`..\`4\`, \`SET ... EX\` on the first free one)
  with \`EVAL\` and sleeps 250 ms between tries; \`releaseScript()\` deletes the slot if it
  still holds the caller's id. The Lua is Laravel's byte for byte (${laravelCheck});
  Laravel's current source has the same scripts and the same 250 ms (\`block()\`'s
  \`$sleep\` default). Slots expire after ${LEASE_S} s; \`block()\`'s time-out is ${LARAVEL_TIMEOUT_S} s here
  (\`Redis::funnel()\`'s default, 3 s, would end some waits).
- **redis-semaphore** ${version('redis-semaphore')}: \`new Semaphore(client, 'funnel', ${SLOTS})\`, \`acquire()\`,
  \`release()\`, default options: \`retryInterval\` ${defaultTimeoutOptions.retryInterval} ms (a Lua script
  over a sorted set, sent with \`EVALSHA\`), \`lockTimeout\` ${defaultTimeoutOptions.lockTimeout / 1000} s,
  \`acquireTimeout\` ${defaultTimeoutOptions.acquireTimeout / 1000} s.

**Handover**: from one holder's release to the next holder's start, on
the clients' monotonic clock: the k-th release (taken when its holder is
done, before the release is sent) frees the slot that the (k + ${SLOTS})-th
acquisition takes (taken when its reply arrives); this is how long a freed
slot stands empty. **Server CPU**: INFO cpu (\`used_cpu_user\` + \`used_cpu_sys\`)
over the measured time, per acquisition. **Commands**: INFO commandstats calls
(a script's own commands counted, INFO's not), per acquisition; native's
include \`THROTTLE._GATE\`, which the module calls inside the server before it
lets a waiter in (it asks Redis whether a write to the key is accepted now).
**Round trips**: the commands the clients sent, per acquisition. The server
idle (its timers alone) used ${fmt(idleCpuPerS, 0)} µs of CPU a second (measured for 1 s
before the rounds); the tables count it as it comes, so a slower funnel pays
more of it per acquisition, and the ratios below also give the CPU less it.

## Steady: every client comes back

Each client asks, holds ${HOLD_MS} ms, releases, and ${THINK_MS} ms later asks again, as a
worker takes its next job. ${ROUNDS} round${ROUNDS === 1 ? '' : 's'}, the implementations taking turns, each
${WARMUP} s of warm-up then ${SECONDS} s measured; the figures are over the measured
seconds of every round.

${steadyTable}

${ratios(steadySummary)}

With polling, a freed slot mostly goes to a client coming back (often the
one that freed it, ${THINK_MS} ms later) before a sleeping waiter's next try, so
the handover there is about the time until someone comes back, and what
waiting costs shows in the waits: from asking to holding, and each client's
acquisitions in each round's measured seconds (the server's queue lets
waiters in in arrival order; a polling client gets in when a try finds a
slot free):

${fairness}

## Burst: everyone asks at once

The ${CLIENTS} clients ask at the same moment, each takes the slot once, and
the burst is over when the last has released; one burst to warm up, then
${BURSTS} measured. Nobody comes back, so every handover goes to a client that
was already waiting: it measures how fast a waiter learns of a free slot.
The polling clients, having failed together, sleep together.

${burstTable}

${ratios(burstSummary)}

The clients, the server and whatever else runs on the machine share its
${cpus().length} cores: compare rows of one run only.
`;
  writeFileSync(out, md);
  console.log(`\nThe funnel (${path.relative(repo, out)}), steady:\n${steadyTable}\n\n${ratios(steadySummary)}\n\n${fairness}\n\nburst:\n${burstTable}\n\n${ratios(burstSummary)}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
