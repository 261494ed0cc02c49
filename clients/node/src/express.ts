import { checkAlgorithm, checkOptions, checkOptionType, type Algorithm, type RedisClientLike } from './command.js';
import type { ThrottleResult } from './reply.js';
import { Throttle } from './throttle.js';

/** rate-limit-redis's convention: `(...args) => client.sendCommand(args)` (node-redis), `(command, ...args) => client.call(command, ...args)` (ioredis). */
export type SendCommandFn = (...args: string[]) => Promise<unknown>;

/** rate-limit-redis's convention for a cluster: `({ key, isReadOnly, command }) => cluster.sendCommand(key, isReadOnly, command)`. */
export type SendCommandClusterFn = (details: { key: string; isReadOnly: boolean; command: string[] }) => Promise<unknown>;

export interface ExpressStoreOptions {
  /** Sends a command, as rate-limit-redis's `sendCommand`. Give this, `sendCommandCluster` or `client`. */
  sendCommand?: SendCommandFn;
  /** Sends a command to the node that serves `key`, as rate-limit-redis's `sendCommandCluster`. */
  sendCommandCluster?: SendCommandClusterFn;
  /** A node-redis or ioredis client or cluster, used directly (routes an ioredis Cluster by key, applies ioredis's keyPrefix). */
  client?: RedisClientLike;
  /** `fixed` (default: express-rate-limit's own window), `sliding`, `sliding-exact`, `token` or `leaky`. */
  algorithm?: Algorithm;
  /** Put before every key. Default `throttle:express:`; give each limiter its own. */
  prefix?: string;
  /**
   * The time of each request as Unix microseconds, sent as the commands'
   * `AT` (tests, replays). Default: none, the server's clock.
   */
  clock?: () => number | bigint;
}

const OPTIONS = ['sendCommand', 'sendCommandCluster', 'client', 'algorithm', 'prefix', 'clock'] as const;

/** Options users bring from other stores, and why this one does not take them. */
const OPTION_HINTS: Record<string, string> = {
  resetExpiryOnChange:
    "rate-limit-redis 5's, removed in rate-limit-redis 6; the module's window ends where express-rate-limit's does, and its keys expire by themselves",
  windowMs: 'give it to rateLimit(), which passes it to the store',
  limit: 'give it to rateLimit(), which passes it to the store',
  max: 'give it to rateLimit(), which passes it to the store',
};

/** What express-rate-limit passes to `init` (the parts the store reads). */
interface RateLimitOptions {
  windowMs: number;
  limit?: number | ((...args: any[]) => unknown);
  max?: number | ((...args: any[]) => unknown);
  skipFailedRequests?: boolean;
}

/** What express-rate-limit's stores answer. */
export interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

/** The module's largest `limit`: a window that never refuses, used to count hits. */
const COUNT_LIMIT = 10 ** 15;

/**
 * express-rate-limit (v7, v8) store on the module: one THROTTLE command per
 * request, refused requests change nothing, and a refund
 * (`skipFailedRequests`, `skipSuccessfulRequests`) gives one unit back.
 *
 * ```js
 * rateLimit({ windowMs: 60_000, limit: 100, store: new ExpressStore({ sendCommand: (...args) => redis.sendCommand(args) }) })
 * ```
 */
export class ExpressStore {
  /** Read by express-rate-limit's checks: the keys live in Redis. */
  readonly localKeys = false;
  readonly prefix: string;
  readonly #throttle: Throttle;
  readonly #algorithm: Algorithm;
  readonly #clock: (() => number | bigint) | undefined;
  #windowMs = 0;
  /** A fixed limit, decided by the module; undefined: count hits and let express-rate-limit decide. */
  #limit: number | undefined;
  #skipFailed = false;
  /**
   * skipFailedRequests has express-rate-limit refund refused requests too
   * (a 429 is a failed request), but a refused request took nothing: per
   * key, until when each refused request's refund may still come (after its
   * reset time express-rate-limit sends none), so that it is not paid out.
   */
  readonly #refused = new Map<string, number[]>();
  /** When #refused holds more keys than this, the ones whose times have all passed are dropped. */
  #sweepAt = 1000;

  constructor(options: ExpressStoreOptions) {
    checkOptions(options, OPTIONS, 'ExpressStore', OPTION_HINTS);
    const given = (['sendCommand', 'sendCommandCluster', 'client'] as const).filter((name) => options?.[name] !== undefined);
    if (given.length !== 1) {
      throw new TypeError('redis-throttle: ExpressStore needs exactly one of sendCommand, sendCommandCluster or client');
    }
    checkOptionType(options.sendCommand, 'function', 'sendCommand');
    checkOptionType(options.sendCommandCluster, 'function', 'sendCommandCluster');
    checkOptionType(options.prefix, 'string', 'prefix');
    checkOptionType(options.clock, 'function', 'clock');
    this.prefix = options.prefix ?? 'throttle:express:';
    this.#algorithm = checkAlgorithm(options.algorithm ?? 'fixed');
    this.#clock = options.clock;
    const { sendCommand, sendCommandCluster, client } = options;
    const target = sendCommand
      ? (args: string[]) => sendCommand(...args)
      : sendCommandCluster
        ? (args: string[], key: string) => sendCommandCluster({ key, isReadOnly: false, command: args })
        : client!;
    this.#throttle = new Throttle(target, { prefix: this.prefix });
  }

  /** Called by express-rate-limit with the limiter's options. */
  init(options: RateLimitOptions): void {
    this.#windowMs = options.windowMs;
    const limit = options.limit ?? options.max;
    this.#limit = typeof limit === 'number' && limit >= 1 ? Math.floor(limit) : undefined;
    // Counting hits for a limit express-rate-limit decides takes a window
    // that never refuses: a bucket's limit is also its rate, and an exact
    // log would keep an entry per request.
    if (this.#limit === undefined && this.#algorithm !== 'fixed' && this.#algorithm !== 'sliding') {
      throw new TypeError(
        `redis-throttle: ExpressStore with algorithm '${this.#algorithm}' needs a fixed limit of at least 1 (a number, not a function); 'fixed' and 'sliding' take any`,
      );
    }
    this.#skipFailed = options.skipFailedRequests === true;
  }

  #call(key: string, cost: number): Promise<ThrottleResult> {
    if (this.#windowMs <= 0) throw new Error('redis-throttle: ExpressStore.init() was not called: pass the store to rateLimit({ store })');
    return this.#throttle.call(
      { algorithm: this.#algorithm, key, limit: this.#limit ?? COUNT_LIMIT, period: this.#windowMs },
      { cost, at: this.#clock?.() },
    );
  }

  /** Now in milliseconds on the store's clock: the injected one, or the process's. */
  #now(): number {
    return this.#clock ? Number(this.#clock()) / 1000 : Date.now();
  }

  #info(r: ThrottleResult, now: number): ClientRateLimitInfo {
    if (this.#limit === undefined) return { totalHits: COUNT_LIMIT - r.remaining, resetTime: new Date(now + r.resetAfter) };
    if (!r.allowed) return { totalHits: this.#limit + 1, resetTime: new Date(now + Math.max(r.retryAfter, 0)) };
    return { totalHits: Math.min(this.#limit, Math.max(0, this.#limit - r.remaining)), resetTime: new Date(now + r.resetAfter) };
  }

  async increment(key: string): Promise<ClientRateLimitInfo> {
    const r = await this.#call(key, 1);
    // The reply's times count from the server's answer: express-rate-limit
    // turns resetTime back into seconds from its own Date.now() right after.
    const info = this.#info(r, Date.now());
    info.totalHits = Math.max(1, info.totalHits);
    if (this.#skipFailed && this.#limit !== undefined && !r.allowed) {
      // Times on the store's clock, which decides when the refund can no longer come.
      const at = this.#now();
      const until = this.#refused.get(key) ?? [];
      until.push(at + Math.max(r.retryAfter, 0));
      this.#refused.set(key, until);
      if (this.#refused.size > this.#sweepAt) this.#sweep(at);
    }
    return info;
  }

  /** Forgets refused requests whose refund can no longer come (a refund that never came, say under a requestWasSuccessful that counts 429 as a success). */
  #sweep(now: number): void {
    for (const [key, until] of this.#refused) {
      if (until.every((t) => t <= now)) this.#refused.delete(key);
    }
    this.#sweepAt = Math.max(1000, 2 * this.#refused.size);
  }

  /** A refund: gives back the unit the request took (nothing for a request that was refused). */
  async decrement(key: string): Promise<void> {
    const until = this.#refused.get(key);
    if (until) {
      const now = this.#now();
      const live = until.filter((t) => t > now);
      const refused = live.length > 0;
      if (refused) live.shift();
      if (live.length > 0) this.#refused.set(key, live);
      else this.#refused.delete(key);
      if (refused) return;
    }
    await this.#call(key, -1);
  }

  /** The key's state, by a peek (COST 0); undefined when the key holds nothing. */
  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    const r = await this.#call(key, 0);
    if (r.resetAfter === 0 && r.remaining === r.limit) return undefined;
    return this.#info(r, Date.now());
  }

  async resetKey(key: string): Promise<void> {
    this.#refused.delete(key);
    await this.#throttle.reset(key);
  }
}
