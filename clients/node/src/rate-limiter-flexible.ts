// A store for rate-limiter-flexible on the module: RateLimiterRedis's
// options and answers, one THROTTLE command per call instead of a Lua
// script or a MULTI. It subclasses the library's own
// RateLimiterStoreAbstract (loaded from the application's
// rate-limiter-flexible when first constructed), so that everything the
// library does around its store (execEvenly, the in-memory block,
// insuranceLimiter, keyPrefix, RateLimiterRes) is the library's own.
import { checkOptions, checkOptionType, senderFor, type RedisClientLike, type Send } from './command.js';
import { requirePeer } from './peer.js';
import type { ThrottleResult } from './reply.js';
import { Throttle } from './throttle.js';

/** rate-limiter-flexible's RateLimiterRes (what consume and the others resolve or reject with). */
export interface RateLimiterResLike {
  remainingPoints: number;
  msBeforeNext: number;
  consumedPoints: number;
  isFirstInDuration: boolean;
}

/** RateLimiterRedis's options, as RateLimiterThrottle takes them. */
export interface RateLimiterThrottleOptions {
  /** A node-redis (v4-v6) or ioredis (v5-v6) client or cluster. */
  storeClient: RedisClientLike;
  /** Points a key may consume per duration (default 4). */
  points?: number;
  /** Seconds a window lasts from its first consume (default 1; 0: the module's longest period, 3650 days). */
  duration?: number;
  /** Seconds a key is banned once it consumes more than `points` (BAN); 0: none. */
  blockDuration?: number;
  /** Put before every key, with a colon (default `rlflx`). */
  keyPrefix?: string;
  execEvenly?: boolean;
  execEvenlyMinDelayMs?: number;
  /** rate-limiter-flexible 11.4: the consumed points at which the key is banned (at least `points`). */
  blockOnConsumed?: number;
  inMemoryBlockOnConsumed?: number;
  inMemoryBlockDuration?: number;
  /** A limiter used while the server fails (usually a RateLimiterMemory). */
  insuranceLimiter?: unknown;
  /** Reject (or use the insuranceLimiter) at once while the client is not connected. */
  rejectIfRedisNotReady?: boolean;
  /** Taken for RateLimiterRedis's sake and not needed: the client is recognised by itself. */
  useRedisPackage?: boolean;
  useRedis3AndLowerPackage?: boolean;
  /** This package's: the time of each call as Unix microseconds, sent as the commands' `AT` (tests, replays). Default: the server's clock. */
  clock?: () => number | bigint;
}

export interface RateLimiterThrottle {
  readonly points: number;
  readonly duration: number;
  readonly blockDuration: number;
  readonly keyPrefix: string;
  consume(key: string | number, pointsToConsume?: number, options?: { customDuration?: number }): Promise<RateLimiterResLike>;
  penalty(key: string | number, points?: number, options?: { customDuration?: number }): Promise<RateLimiterResLike>;
  reward(key: string | number, points?: number, options?: { customDuration?: number }): Promise<RateLimiterResLike>;
  block(key: string | number, secDuration: number, options?: object): Promise<RateLimiterResLike>;
  get(key: string | number, options?: object): Promise<RateLimiterResLike | null>;
  set(key: string | number, points: number, secDuration: number, options?: object): Promise<RateLimiterResLike>;
  delete(key: string | number, options?: object): Promise<boolean>;
  getKey(key: string | number): string;
}

export interface RateLimiterThrottleConstructor {
  new (options: RateLimiterThrottleOptions): RateLimiterThrottle;
}

const OPTIONS = [
  'storeClient', 'points', 'duration', 'blockDuration', 'keyPrefix', 'execEvenly', 'execEvenlyMinDelayMs',
  'blockOnConsumed', 'inMemoryBlockOnConsumed', 'inMemoryBlockDuration', 'insuranceLimiter',
  'rejectIfRedisNotReady', 'useRedisPackage', 'useRedis3AndLowerPackage', 'clock',
];
const HINTS = {
  customIncrTtlLuaScript: 'the module replaces the Lua script: each call is one THROTTLE command',
  redis: "rate-limiter-flexible's old name for storeClient: give storeClient",
};

/** The module's longest period and ban (3650 days): rate-limiter-flexible's "forever" (0 seconds). */
const FOREVER_MS = 3650 * 86_400_000;
/** The module's largest TALLY cap: consumedPoints counts refused points too, as INCRBY does. */
const TALLY_CAP = 10 ** 15;
/** Marks the _block call that _afterConsume makes after a consume whose own BAN already banned the key. */
const BANNED_BY_CONSUME = Symbol('redis-throttle: banned by the consume');

/** What the store hands to _getRateLimiterRes: the key's count and the time to its idle state or its ban's end. */
interface StoreResult {
  hits: number;
  msBeforeNext: number;
  banned: number;
}

const periodMs = (ms: number) => (ms > 0 ? Math.min(Math.ceil(ms), FOREVER_MS) : FOREVER_MS);

function storeResult(r: ThrottleResult): StoreResult {
  return { hits: r.hits ?? 0, msBeforeNext: r.resetAfter, banned: r.banned ?? 0 };
}

/** Whether the client is connected, as RateLimiterRedis's rejectIfRedisNotReady reads it. */
function isReady(client: any, rlKey: string): boolean {
  if (typeof client?.status === 'string') return client.status === 'ready'; // ioredis
  if (typeof client?.isReady === 'function') return client.isReady() === true; // node-redis 3
  if (typeof client?.isReady === 'boolean') return client.isReady; // node-redis 4 and later
  if (typeof client?._slots?.getClient === 'function') {
    // a node-redis 4 (and later) cluster
    if (typeof client.isOpen === 'boolean' && !client.isOpen) return false;
    try {
      return client._slots.getClient(rlKey, false)?.isReady === true;
    } catch {
      return false;
    }
  }
  return true;
}

let made: RateLimiterThrottleConstructor | undefined;

/** The class, made on first use from the application's rate-limiter-flexible. */
function makeClass(): RateLimiterThrottleConstructor {
  if (made) return made;
  let Base: any;
  let Res: any;
  try {
    Base = requirePeer('rate-limiter-flexible/lib/RateLimiterStoreAbstract');
    Res = requirePeer('rate-limiter-flexible/lib/RateLimiterRes');
  } catch (error) {
    throw new Error('redis-throttle: RateLimiterThrottle needs rate-limiter-flexible (v5 or later): npm install rate-limiter-flexible', { cause: error });
  }

  const checked = (opts: RateLimiterThrottleOptions) => {
    checkOptions(opts, OPTIONS, 'RateLimiterThrottle', HINTS);
    checkOptionType(opts?.clock, 'function', 'clock');
    return opts;
  };

  class Store extends Base {
    #sender: { throttle: Throttle; send: Send; keyPrefix: string } | undefined;
    readonly #client: RedisClientLike;
    readonly #rejectIfNotReady: boolean;
    readonly #clock: (() => number | bigint) | undefined;

    constructor(opts: RateLimiterThrottleOptions) {
      super(checked(opts));
      this.#clock = opts.clock;
      // RateLimiterStoreAbstract's setter refuses a missing client as RateLimiterRedis does.
      this.client = opts.storeClient;
      this.#client = opts.storeClient;
      this.#rejectIfNotReady = !!opts.rejectIfRedisNotReady;
      // A wrong client fails here; under rejectIfRedisNotReady a client that
      // is not ready yet fails at its first call, after the readiness check.
      if (!this.#rejectIfNotReady) this.#connection();
    }

    #connection(): { throttle: Throttle; send: Send; keyPrefix: string } {
      if (!this.#sender) {
        const { send, keyPrefix } = senderFor(this.#client);
        this.#sender = { throttle: new Throttle(this.#client), send, keyPrefix };
      }
      return this.#sender;
    }

    #checkReady(rlKey: string): void {
      if (this.#rejectIfNotReady && !isReady(this.#client, rlKey)) throw new Error('Redis connection is not ready');
    }

    /** The limit the module checks: `points`, or under blockOnConsumed the count below which no ban starts. */
    #limit(): number {
      const blockOn = this.blockOnConsumed > 0 && this.blockOnConsumed > this.points ? this.blockOnConsumed - 1 : this.points;
      return Math.max(1, Math.floor(blockOn));
    }

    async #call(rlKey: string, period: number, options: Record<string, unknown>): Promise<ThrottleResult> {
      this.#checkReady(rlKey);
      return this.#connection().throttle.call({ algorithm: 'fixed', key: rlKey, limit: this.#limit(), period: periodMs(period) }, { ...options, at: this.#clock?.(), detail: true });
    }

    /** consume: THROTTLE.FIXED key points duration COST n TALLY cap [BAN blockDuration] DETAIL. */
    _consume(key: string | number, pointsToConsume = 1, options: Record<string | symbol, unknown> = {}): Promise<RateLimiterResLike> {
      return new Promise((resolve, reject) => {
        const rlKey = this.getKey(key);
        const inMemory = this.getInMemoryBlockMsBeforeExpire(rlKey);
        if (inMemory > 0) {
          reject(new Res(0, inMemory));
          return;
        }
        const ban = this.blockDuration > 0 ? { ban: periodMs(this.msBlockDuration) } : {};
        this.#points(pointsToConsume)
          .then((cost) => this.#call(rlKey, this._getKeySecDuration(options) * 1000, { cost, tally: TALLY_CAP, ...ban }))
          .then((r) => this._afterConsume(resolve, reject, rlKey, pointsToConsume, storeResult(r), { ...options, [BANNED_BY_CONSUME]: true }))
          .catch(reject);
      });
    }

    /** penalty: FORCE, the points taken whether or not they fit. */
    _penalty(key: string | number, points = 1, options: Record<string, unknown> = {}): Promise<RateLimiterResLike> {
      const rlKey = this.getKey(key);
      return this.#points(points)
        .then((cost) => this.#call(rlKey, this._getKeySecDuration(options) * 1000, { cost, force: true }))
        .then((r) => this._getRateLimiterRes(rlKey, points, storeResult(r)));
    }

    /** reward: a refund, a negative COST (never below nothing used). */
    _reward(key: string | number, points = 1, options: Record<string, unknown> = {}): Promise<RateLimiterResLike> {
      const rlKey = this.getKey(key);
      return this.#points(points)
        .then((cost) => this.#call(rlKey, this._getKeySecDuration(options) * 1000, { cost: -cost }))
        .then((r) => this._getRateLimiterRes(rlKey, -points, storeResult(r)));
    }

    /**
     * block: BAN d NOW. After a consume that crossed the limit the consume's
     * own BAN already banned the key: nothing is sent.
     */
    _block(rlKey: string, initPoints: number, msDuration: number, options: Record<string | symbol, unknown> = {}): Promise<RateLimiterResLike> {
      const resolved = () => new Res(0, msDuration > 0 ? msDuration : -1, initPoints);
      if (options[BANNED_BY_CONSUME]) return Promise.resolve(resolved());
      return new Promise((resolve, reject) => {
        this.#call(rlKey, this.msDuration, { cost: 0, ban: periodMs(msDuration), banNow: true })
          .then(() => resolve(resolved()))
          .catch((error) => this._handleError(error, 'block', resolve, reject, [this.parseKey(rlKey), msDuration / 1000, options]));
      });
    }

    /**
     * set: the key holds `points` for `msDuration` (0: the longest period):
     * DEL, then the points forced into a window of that length. Two
     * commands, the one call of this store that is not one.
     */
    _set(rlKey: string, points: number, msDuration: number, options: Record<string, unknown> = {}): Promise<RateLimiterResLike> {
      return new Promise((resolve, reject) => {
        this.#points(points)
          .then(async (cost) => {
            await this._delete(rlKey);
            if (cost > 0) await this.#call(rlKey, msDuration, { cost, force: true });
          })
          .then(() => resolve(new Res(0, msDuration > 0 ? msDuration : -1, points)))
          .catch((error) => this._handleError(error, 'set', resolve, reject, [this.parseKey(rlKey), points, msDuration / 1000, options]));
      });
    }

    /** get: a peek (COST 0); null when the key holds nothing. */
    async _get(rlKey: string): Promise<StoreResult | null> {
      const r = storeResult(await this.#call(rlKey, this.msDuration, { cost: 0 }));
      return r.hits === 0 && r.banned === 0 ? null : r;
    }

    /** delete: DEL. */
    async _delete(rlKey: string): Promise<boolean> {
      this.#checkReady(rlKey);
      const { send, keyPrefix } = this.#connection();
      const full = keyPrefix + rlKey;
      const reply = await send(['DEL', full], full);
      return Number(reply) > 0;
    }

    _upsert(): Promise<never> {
      return Promise.reject(new Error('redis-throttle: RateLimiterThrottle sends one THROTTLE command per call, not an upsert'));
    }

    /**
     * The library's answer from the key's count. In a ban the count is at
     * least what the library sets a blocked key to (points + 1, or
     * blockOnConsumed): a manual ban (BAN NOW) keeps the key's own count.
     */
    _getRateLimiterRes(_rlKey: string, changedPoints: number, result: StoreResult): RateLimiterResLike {
      const res = new Res();
      const blocked = this.blockOnConsumed > 0 && this.blockOnConsumed > this.points ? this.blockOnConsumed : this.points + 1;
      res.consumedPoints = result.banned > 0 ? Math.max(result.hits, blocked) : result.hits;
      res.isFirstInDuration = res.consumedPoints === changedPoints;
      res.remainingPoints = Math.max(this.points - res.consumedPoints, 0);
      res.msBeforeNext = result.msBeforeNext;
      return res;
    }

    /** Points as RateLimiterRedis takes them: integers (a string of digits too). */
    async #points(points: unknown): Promise<number> {
      if (typeof points === 'string') {
        if (!/^[1-9][0-9]*$/.test(points)) throw new Error('Consuming string different than integer values is not supported by this package');
        return Number(points);
      }
      if (!Number.isInteger(points)) throw new Error('Consuming decimal number of points is not supported by this package');
      return points as number;
    }
  }
  Object.defineProperty(Store, 'name', { value: 'RateLimiterThrottle' });
  made = Store as unknown as RateLimiterThrottleConstructor;
  return made;
}

/**
 * rate-limiter-flexible's RateLimiterRedis on the module: the same options
 * and answers, one THROTTLE command per call. Needs rate-limiter-flexible
 * installed beside this package.
 *
 * ```js
 * const limiter = new RateLimiterThrottle({ storeClient: redis, points: 5, duration: 1, blockDuration: 60 });
 * await limiter.consume(ip); // rejects with a RateLimiterRes when over
 * ```
 */
export const RateLimiterThrottle: RateLimiterThrottleConstructor = function RateLimiterThrottle(this: unknown, options: RateLimiterThrottleOptions) {
  if (!new.target) throw new TypeError("redis-throttle: RateLimiterThrottle is a class: call it with 'new'");
  const Store = makeClass();
  // instanceof RateLimiterThrottle holds once the class is made.
  if (RateLimiterThrottle.prototype !== Store.prototype) (RateLimiterThrottle as { prototype: unknown }).prototype = Store.prototype;
  return Reflect.construct(Store, [options], new.target === RateLimiterThrottle ? Store : new.target);
} as unknown as RateLimiterThrottleConstructor;
