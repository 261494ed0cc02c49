// Building THROTTLE commands, and sending them through whichever client the
// application has: one command per call, routed by its key in a cluster.

/** The algorithms, by the names the module's types and THROTTLE.INFO use. */
export type Algorithm = 'fixed' | 'sliding' | 'sliding-exact' | 'token' | 'leaky';

/** Milliseconds (a positive integer), or one of the module's period strings: `'500ms'`, `'1s'`, `'15m'`, `'24h'`, `'7d'`. */
export type Period = number | string;

const ALGORITHMS: Record<Algorithm, { spec: string; exact: boolean }> = {
  fixed: { spec: 'FIXED', exact: false },
  sliding: { spec: 'SLIDING', exact: false },
  'sliding-exact': { spec: 'SLIDING', exact: true },
  token: { spec: 'TOKEN', exact: false },
  leaky: { spec: 'LEAKY', exact: false },
};

export function checkAlgorithm(algorithm: string): Algorithm {
  if (!Object.hasOwn(ALGORITHMS, algorithm)) {
    throw new TypeError(
      `redis-throttle: unknown algorithm ${JSON.stringify(algorithm)}: expected one of ${Object.keys(ALGORITHMS).join(', ')}`,
    );
  }
  return algorithm as Algorithm;
}

/**
 * The penalties a limit applies when it refuses a call (see the module's
 * docs/penalties.md): a ban, and refused units that count.
 */
export interface PenaltyOptions {
  /** `BAN d`: a refused call bans the key for this long (milliseconds or a period string), from that call. */
  ban?: Period;
  /** `RENEW` (with `ban`): each refused call during the ban restarts it (fastify's `continueExceeding`). */
  renew?: boolean;
  /** `BACKOFF max` (with `ban`): each refused call during the ban doubles it, up to this (fastify's `exponentialBackoff`). */
  backoff?: Period;
  /** `TALLY cap`: a refused call's units count all the same, until the key counts `cap` units (1 to 10^15). */
  tally?: number;
}

/** One limit: what THROTTLE.<ALGORITHM> and a THROTTLE.ALL spec take. */
export interface LimitSpec extends PenaltyOptions {
  algorithm: Algorithm;
  key: string;
  limit: number;
  period: Period;
  /** TOKEN and LEAKY: the bucket's capacity (default: `limit`). */
  burst?: number;
}

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A period as the module reads it: a number is milliseconds, a string is passed on as it is. */
export function periodArg(period: Period, what = 'period'): string {
  if (typeof period === 'number') {
    if (!Number.isSafeInteger(period) || period < 1) {
      throw new TypeError(`redis-throttle: ${what} must be a positive integer of milliseconds or a period string such as '1s', got ${period}`);
    }
    return `${period}ms`;
  }
  if (typeof period === 'string' && /^\d+(ms|s|m|h|d)?$/i.test(period)) return period;
  throw new TypeError(`redis-throttle: ${what} must be milliseconds or a period string ('500ms', '1s', '15m', '24h', '7d'), got ${JSON.stringify(period)}`);
}

/** BLOCK takes milliseconds only: a period string is converted (a bare number string is seconds, as in the module). */
export function blockArg(block: Period): string {
  if (typeof block === 'number') {
    if (!Number.isSafeInteger(block) || block < 0) {
      throw new TypeError(`redis-throttle: block must be a non-negative integer of milliseconds (0: no time-out), got ${block}`);
    }
    return String(block);
  }
  const m = typeof block === 'string' ? /^(\d+)(ms|s|m|h|d)?$/i.exec(block) : null;
  if (!m) throw new TypeError(`redis-throttle: block must be milliseconds or a period string, got ${JSON.stringify(block)}`);
  const ms = BigInt(m[1]!) * BigInt(UNIT_MS[(m[2] ?? 's').toLowerCase()]!);
  return ms.toString();
}

/** A key as the caller gives it, before any prefix: a string. */
export function keyArg(key: unknown): string {
  if (typeof key !== 'string') throw new TypeError(`redis-throttle: key must be a string, got ${key === null ? 'null' : typeof key}`);
  return key;
}

export function integerArg(value: number | bigint, what: string): string {
  if (typeof value === 'bigint') return value.toString();
  if (!Number.isSafeInteger(value)) throw new TypeError(`redis-throttle: ${what} must be an integer, got ${value}`);
  return String(value);
}

export interface CallOptions extends PenaltyOptions {
  /** Units this call asks for (default 1); 0 peeks, a negative cost gives units back. */
  cost?: number;
  /** Wait on the server up to this long to be admitted (milliseconds or a period string; 0: no time-out). */
  block?: Period;
  /** The call's time as Unix microseconds instead of the server's clock (tests, replays). */
  at?: number | bigint;
  /** `FORCE`: the units are taken whether or not they fit; with `ban`, units that push the key over its limit start the ban. */
  force?: boolean;
  /** `NOW` (with `ban`): ban the key for `ban` at once, whatever it holds (a manual ban). */
  banNow?: boolean;
  /** `DETAIL`: the result adds `hits`, `banned` and `nextFree`. */
  detail?: boolean;
}

/**
 * Refuses an option this package does not know: ignoring it would leave the
 * caller believing it works. `options` must be an object (or undefined);
 * each own key must be in `known`, unless its value is undefined (not given).
 * `hints` explains why a known mistake is not taken.
 */
export function checkOptions(options: unknown, known: readonly string[], where: string, hints: Readonly<Record<string, string>> = {}): void {
  if (options === undefined) return;
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new TypeError(`redis-throttle: ${where} takes an options object, got ${options === null ? 'null' : Array.isArray(options) ? 'an array' : typeof options}`);
  }
  const unknown = Object.keys(options).filter((name) => !known.includes(name) && (options as Record<string, unknown>)[name] !== undefined);
  if (unknown.length === 0) return;
  const named = unknown.map((name) => (Object.hasOwn(hints, name) ? `${name} (${hints[name]})` : name));
  throw new TypeError(
    `redis-throttle: ${where} does not support the option${unknown.length > 1 ? 's' : ''} ${named.join(', ')}; ` +
      `it takes ${known.length > 0 ? known.join(', ') : 'none'}`,
  );
}

/** Refuses a value of the wrong type for an option (undefined: not given). */
export function checkOptionType(value: unknown, type: 'string' | 'boolean' | 'function', what: string): void {
  if (value !== undefined && typeof value !== type) {
    throw new TypeError(`redis-throttle: ${what} must be a ${type}, got ${value === null ? 'null' : typeof value}`);
  }
}

const PENALTIES = ['ban', 'renew', 'backoff', 'tally'] as const;
const SPEC_FIELDS = ['algorithm', 'key', 'limit', 'period', 'burst', ...PENALTIES] as const;
const CALL_OPTIONS = ['cost', 'block', 'at', ...PENALTIES, 'force', 'banNow', 'detail'] as const;

/** Refuses call options this call does not take (`extra`: the method's own, such as `exact` or `burst`). */
export function checkCallOptions(options: unknown, where: string, extra: readonly string[] = [], hints: Readonly<Record<string, string>> = {}): void {
  checkOptions(options, [...CALL_OPTIONS, ...extra], where, {
    burst: 'only token() and leaky() take a burst',
    exact: 'only sliding() takes exact',
    ...hints,
  });
}

/** `[BAN d [RENEW | BACKOFF max]] [TALLY cap]` (a single call's `NOW` is added by callArgs). */
function penaltyArgs(p: PenaltyOptions): string[] {
  checkOptionType(p.renew, 'boolean', 'renew');
  const args: string[] = [];
  if (p.ban !== undefined) {
    args.push('BAN', periodArg(p.ban, 'ban'));
    if (p.renew && p.backoff !== undefined) throw new TypeError('redis-throttle: renew and backoff are two kinds of ban: give one of them');
    if (p.renew) args.push('RENEW');
    if (p.backoff !== undefined) args.push('BACKOFF', periodArg(p.backoff, 'backoff'));
  } else {
    const orphan = [p.renew && 'renew', p.backoff !== undefined && 'backoff'].filter(Boolean);
    if (orphan.length > 0) throw new TypeError(`redis-throttle: ${orphan.join(', ')} needs ban (the ban's length)`);
  }
  if (p.tally !== undefined) args.push('TALLY', integerArg(p.tally, 'tally'));
  return args;
}

/** A limit as THROTTLE.ALL takes it: ALGORITHM key limit period [BURST b] [EXACT] [penalties]. */
function specArgs(spec: LimitSpec, extra: PenaltyOptions = {}): string[] {
  checkOptions(spec, SPEC_FIELDS, 'a limit', {
    exact: "give algorithm: 'sliding-exact'",
    cost: 'cost is an option of the call, not of a limit',
    at: 'at is an option of the call, not of a limit',
    block: 'block is an option of the call, not of a limit',
    force: 'force is an option of a single call, not of a limit (THROTTLE.ALL does not take FORCE)',
    banNow: 'banNow is an option of a single call, not of a limit (THROTTLE.ALL does not take NOW)',
    detail: 'detail is an option of the call, not of a limit',
  });
  const { spec: name, exact } = ALGORITHMS[checkAlgorithm(spec.algorithm)];
  if (spec.burst !== undefined && name !== 'TOKEN' && name !== 'LEAKY') {
    throw new TypeError(`redis-throttle: burst is for the token and leaky algorithms only, not ${spec.algorithm}`);
  }
  const args = [name, spec.key, integerArg(spec.limit, 'limit'), periodArg(spec.period)];
  if (spec.burst !== undefined) args.push('BURST', integerArg(spec.burst, 'burst'));
  if (exact) args.push('EXACT');
  const twice = PENALTIES.filter((name) => spec[name] !== undefined && extra[name] !== undefined);
  if (twice.length > 0) throw new TypeError(`redis-throttle: ${twice.join(', ')} given both in the limit and in the options: give it once`);
  args.push(...penaltyArgs({ ...spec, ...Object.fromEntries(PENALTIES.filter((n) => extra[n] !== undefined).map((n) => [n, extra[n]])) }));
  return args;
}

/**
 * THROTTLE.<ALGORITHM> key limit period [BURST b] [EXACT] [BAN d [RENEW |
 * BACKOFF max] [NOW]] [TALLY cap] [COST n] [AT µs] [BLOCK ms] [FORCE] [DETAIL].
 * The penalties may be given in the limit or in the options, not in both.
 */
export function callArgs(spec: LimitSpec, options: CallOptions = {}): string[] {
  checkCallOptions(options, 'call()', [], {
    exact: "give the limit algorithm: 'sliding-exact'",
    burst: 'burst is a field of the limit: { algorithm, key, limit, period, burst }',
  });
  checkOptionType(options.force, 'boolean', 'force');
  checkOptionType(options.banNow, 'boolean', 'banNow');
  checkOptionType(options.detail, 'boolean', 'detail');
  const [name, ...rest] = specArgs(spec, options);
  const args = [`THROTTLE.${name}`, ...rest];
  if (options.banNow) {
    if (spec.ban === undefined && options.ban === undefined) throw new TypeError("redis-throttle: banNow needs ban (the ban's length)");
    args.push('NOW');
  }
  if (options.cost !== undefined) args.push('COST', integerArg(options.cost, 'cost'));
  if (options.at !== undefined) args.push('AT', integerArg(options.at, 'at'));
  if (options.block !== undefined) args.push('BLOCK', blockArg(options.block));
  if (options.force) args.push('FORCE');
  if (options.detail) args.push('DETAIL');
  return args;
}

/** What all() takes besides its limits. */
export type AllOptions = Pick<CallOptions, 'cost' | 'at' | 'detail'>;

/** THROTTLE.ALL [COST n] [AT µs] [DETAIL] spec...: every spec's key must share a hash slot in a cluster. */
export function allArgs(specs: LimitSpec[], options: AllOptions = {}): string[] {
  checkOptions(options, ['cost', 'at', 'detail'], 'all()', {
    block: 'THROTTLE.ALL answers at once, it does not block',
    force: 'THROTTLE.ALL does not take FORCE: force units into one limit at a time',
    banNow: 'THROTTLE.ALL does not take NOW: ban one limit at a time',
    ban: 'each limit takes its own ban: { algorithm, key, limit, period, ban }',
    renew: 'each limit takes its own renew',
    backoff: 'each limit takes its own backoff',
    tally: 'each limit takes its own tally',
  });
  checkOptionType(options.detail, 'boolean', 'detail');
  if (!Array.isArray(specs) || specs.length === 0) throw new TypeError('redis-throttle: all() needs at least one limit');
  const args = ['THROTTLE.ALL'];
  if (options.cost !== undefined) args.push('COST', integerArg(options.cost, 'cost'));
  if (options.at !== undefined) args.push('AT', integerArg(options.at, 'at'));
  if (options.detail) args.push('DETAIL');
  for (const spec of specs) args.push(...specArgs(spec));
  return args;
}

/**
 * The module is not loaded on the server: its commands are unknown there.
 * `cause` is the server's own error.
 */
export class ThrottleModuleMissingError extends Error {
  override name = 'ThrottleModuleMissingError';
  constructor(command: string, cause: unknown) {
    super(
      `redis-throttle: the server has no ${command} command: the THROTTLE commands are missing because the redis-throttle module is not loaded. ` +
        'Load it with the line `loadmodule /path/to/libredis_throttle.so` in redis.conf, ' +
        'or `MODULE LOAD /path/to/libredis_throttle.so`, or `redis-server --loadmodule /path/to/libredis_throttle.so` ' +
        `(server said: ${cause instanceof Error ? cause.message : String(cause)})`,
      { cause },
    );
  }
}

/** Turns the server's "unknown command" for a THROTTLE command into ThrottleModuleMissingError. */
export function explain(error: unknown, command: string): unknown {
  const message = error instanceof Error ? error.message : typeof error === 'string' ? error : '';
  if (/unknown command/i.test(message) && message.toUpperCase().includes(command.toUpperCase())) {
    return new ThrottleModuleMissingError(command, error);
  }
  return error;
}

/**
 * Sends one command (`args`: its name and arguments) and resolves to the
 * reply; `key` is the key it acts on, for routing in a cluster.
 */
export type Send = (args: string[], key: string) => Promise<unknown>;

/**
 * A node-redis client (v4-v6: `createClient()`, `createClientPool()`, or a
 * `duplicate()`): commands go through `sendCommand(args)`. Only the method
 * this package uses is named, so that any of those versions fits.
 */
export interface NodeRedisClientLike {
  sendCommand(args: string[]): Promise<unknown>;
}

/** A node-redis cluster (v4-v6: `createCluster()`): `sendCommand(firstKey, isReadonly, args)` routes by `firstKey`. */
export interface NodeRedisClusterLike {
  sendCommand(firstKey: string, isReadonly: boolean, args: string[]): Promise<unknown>;
  getSlotMaster(slot: number): unknown;
}

/** An ioredis (v5-v6) `Redis` or `Cluster`: commands go through `call(command, ...args)`. */
export interface IoredisLike {
  call(command: string, ...args: string[]): Promise<unknown>;
  options: object;
}

/**
 * What an application passes: a node-redis (v4-v6) or ioredis (v5-v6) client
 * or cluster. Anything else (`{}`, a connection URL, a node-redis sentinel) is
 * a compile error, and a `TypeError` at run time for JavaScript callers.
 */
export type RedisClientLike = NodeRedisClientLike | NodeRedisClusterLike | IoredisLike;

interface IoredisCommand {
  keys?: unknown[];
}

/**
 * The function that sends a command through `client`, and the key prefix
 * the client applies to keys (ioredis's `keyPrefix`, which ioredis itself
 * does not apply to commands it does not know).
 */
export function senderFor(client: RedisClientLike | Send): { send: Send; keyPrefix: string } {
  if (typeof client === 'function') return { send: client as Send, keyPrefix: '' };
  const c = (client !== null && typeof client === 'object' ? client : {}) as Record<string, any>;
  if (typeof c.call === 'function' && c.options && typeof c.options === 'object') {
    // ioredis. It applies its keyPrefix, and a cluster routes, by the key
    // positions of the commands it knows: Redis's own, not the module's. So
    // its commands are built with keyPrefix off (the package prefixes every
    // key itself) and, in a cluster, told their key, so that each goes
    // straight to the node that serves it instead of a random node and a
    // MOVED reply.
    const keyPrefix = typeof c.options.keyPrefix === 'string' ? c.options.keyPrefix : '';
    let routeKey: string | undefined;
    const router = Object.create(client, {
      options: { value: { ...c.options, keyPrefix: undefined, enableAutoPipelining: false } },
      sendCommand: {
        value(command: IoredisCommand, ...more: unknown[]) {
          if (c.isCluster) command.keys = [routeKey];
          return c.sendCommand(command, ...more);
        },
      },
    });
    const send: Send = ([name, ...rest], key) => {
      // call() builds the command and hands it to sendCommand synchronously.
      routeKey = key;
      try {
        return router.call(name, ...rest);
      } finally {
        routeKey = undefined;
      }
    };
    return { send, keyPrefix };
  }
  if (typeof c.sendCommand === 'function' && typeof c.getSentinelNode === 'function') {
    // node-redis's sentinel client takes sendCommand(isReadonly, args): not a client this package drives.
    throw new TypeError(
      'redis-throttle: a node-redis sentinel (createSentinel) is not supported: pass a function that sends through it, ' +
        '(args) => sentinel.sendCommand(false, args), or an ioredis client with its sentinels option',
    );
  }
  if (typeof c.sendCommand === 'function') {
    // node-redis: a cluster routes by the first key it is given.
    if (typeof c.getSlotMaster === 'function') return { send: (args, key) => c.sendCommand(key, false, args), keyPrefix: '' };
    return { send: (args) => c.sendCommand(args), keyPrefix: '' };
  }
  throw new TypeError(
    'redis-throttle: expected a node-redis client or cluster (createClient, createCluster), an ioredis Redis or Cluster, or a function (args, key) => reply, ' +
      `got ${client === null ? 'null' : typeof client === 'object' ? `an object without sendCommand or call (keys: ${Object.keys(c).slice(0, 5).join(', ') || 'none'})` : typeof client}`,
  );
}
