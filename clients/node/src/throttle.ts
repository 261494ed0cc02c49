import {
  allArgs,
  callArgs,
  checkCallOptions,
  checkOptions,
  checkOptionType,
  explain,
  integerArg,
  keyArg,
  senderFor,
  type Algorithm,
  type AllOptions,
  type CallOptions,
  type LimitSpec,
  type Period,
  type RedisClientLike,
  type Send,
} from './command.js';
import { parseAllResult, parseInfo, parseResult, type ThrottleAllResult, type ThrottleInfo, type ThrottleResult } from './reply.js';
import { acquireLease, releaseLease, renewLease, withLease, type AcquireOptions, type AcquireResult, type Lease, type LeaseContext } from './lease.js';

export interface ThrottleOptions {
  /** Put before every key (after an ioredis client's own `keyPrefix`). Default: none. */
  prefix?: string;
}

/**
 * The module's commands on a node-redis (v4-v6) or ioredis (v5-v6) client or
 * cluster, or on any function that sends a command: one command per call,
 * RESP2 or RESP3.
 *
 * ```js
 * const throttle = new Throttle(redis);
 * const r = await throttle.sliding('api:user:42', 100, '1m');
 * if (!r.allowed) res.setHeader('Retry-After', Math.ceil(r.retryAfter / 1000));
 * ```
 */
export class Throttle {
  readonly #send: Send;
  readonly #prefix: string;
  readonly #leases: LeaseContext;

  constructor(client: RedisClientLike | Send, options: ThrottleOptions = {}) {
    checkOptions(options, ['prefix'], 'Throttle', {
      keyPrefix: "give ioredis's keyPrefix to ioredis (the package applies it), or this package's prefix",
    });
    checkOptionType(options.prefix, 'string', 'prefix');
    const { send, keyPrefix } = senderFor(client);
    this.#send = send;
    this.#prefix = keyPrefix + (options.prefix ?? '');
    this.#leases = { send, prefix: this.#prefix, client };
  }

  /** Sends one command built by this package; `key` is the routed (prefixed) key. */
  async #run(key: string, args: string[]): Promise<unknown> {
    try {
      return await this.#send(args, key);
    } catch (error) {
      throw explain(error, args[0]!);
    }
  }

  /** One limit, as `THROTTLE.<ALGORITHM>` (the stores build on this). */
  async call(spec: LimitSpec, options: CallOptions = {}): Promise<ThrottleResult> {
    const key = this.#prefix + keyArg(spec?.key);
    const args = callArgs({ ...spec, key }, options);
    return parseResult(await this.#run(key, args), args[0]);
  }

  /** THROTTLE.FIXED: at most `limit` per window of `period`, opened by the first admitted call. */
  async fixed(key: string, limit: number, period: Period, options?: CallOptions): Promise<ThrottleResult> {
    checkCallOptions(options, 'fixed()');
    return this.call({ algorithm: 'fixed', key, limit, period }, options);
  }

  /** THROTTLE.SLIDING: the sliding-window estimate, or with `exact` the exact sliding log. */
  async sliding(key: string, limit: number, period: Period, options: CallOptions & { exact?: boolean } = {}): Promise<ThrottleResult> {
    checkCallOptions(options, 'sliding()', ['exact']);
    const { exact, ...rest } = options;
    checkOptionType(exact, 'boolean', 'exact');
    return this.call({ algorithm: exact ? 'sliding-exact' : 'sliding', key, limit, period }, rest);
  }

  /** THROTTLE.TOKEN: a bucket of `burst` tokens (default `limit`) refilled at `limit` per `period`. */
  async token(key: string, limit: number, period: Period, options: CallOptions & { burst?: number } = {}): Promise<ThrottleResult> {
    checkCallOptions(options, 'token()', ['burst']);
    const { burst, ...rest } = options;
    return this.call({ algorithm: 'token', key, limit, period, burst }, rest);
  }

  /** THROTTLE.LEAKY: a bucket of `burst` units (default `limit`) draining at `limit` per `period`. */
  async leaky(key: string, limit: number, period: Period, options: CallOptions & { burst?: number } = {}): Promise<ThrottleResult> {
    checkCallOptions(options, 'leaky()', ['burst']);
    const { burst, ...rest } = options;
    return this.call({ algorithm: 'leaky', key, limit, period, burst }, rest);
  }

  /**
   * THROTTLE.ALL: several limits at once, all or nothing. In a cluster every
   * key must share a hash slot: use a hash tag (`{user:42}:s`, `{user:42}:h`).
   */
  async all(limits: LimitSpec[], options: AllOptions = {}): Promise<ThrottleAllResult> {
    if (!Array.isArray(limits)) throw new TypeError('redis-throttle: all() takes an array of limits');
    const specs = limits.map((spec) => ({ ...spec, key: this.#prefix + keyArg(spec?.key) }));
    const args = allArgs(specs, options);
    return parseAllResult(await this.#run(specs[0]!.key, args), specs.length);
  }

  /** THROTTLE.INFO: what the key holds, or null when it holds nothing. Changes nothing. */
  async info(key: string, options: Pick<CallOptions, 'at'> = {}): Promise<ThrottleInfo | null> {
    checkOptions(options, ['at'], 'info()', { cost: 'THROTTLE.INFO changes nothing; a peek is a call with cost 0' });
    const full = this.#prefix + keyArg(key);
    const args = ['THROTTLE.INFO', full];
    if (options.at !== undefined) args.push('AT', integerArg(options.at, 'at'));
    return parseInfo(await this.#run(full, args));
  }

  /**
   * THROTTLE.ACQUIRE: one of `limit` slots of `key` for `lease` (ms or a
   * period string). Resolves to a `Lease` (`allowed: true`, its `token`,
   * `release()`, `renew()`) or, when every slot is held, the refusal
   * (`allowed: false`, `retryAfter`: ms until a slot frees). With `block` it
   * waits on the server, holding its connection unless `isolated`.
   */
  async acquire(key: string, limit: number, lease: Period, options?: AcquireOptions): Promise<AcquireResult> {
    return acquireLease(this.#leases, key, limit, lease, options);
  }

  /** THROTTLE.RELEASE: true when `token` held a lease on `key` (its slot is free now), false when it did not (nothing changed). */
  async release(key: string, token: string, options?: { at?: number | bigint }): Promise<boolean> {
    return releaseLease(this.#leases, key, token, options);
  }

  /** THROTTLE.RENEW: true when `token` held a lease on `key` (it now ends `lease` from now), false when it did not. */
  async renew(key: string, token: string, lease: Period, options?: { at?: number | bigint }): Promise<boolean> {
    return renewLease(this.#leases, key, token, lease, options);
  }

  /**
   * Acquires a lease (waiting up to `block`), runs `fn(lease)`, and releases
   * the lease when `fn` settles. Rejects with LeaseNotAcquiredError when no
   * slot came in time.
   */
  async withLease<T>(key: string, limit: number, lease: Period, fn: (lease: Lease) => T | Promise<T>, options?: AcquireOptions): Promise<T> {
    return withLease(this.#leases, key, limit, lease, fn, options);
  }

  /** Deletes the key (a reset). */
  async reset(key: string): Promise<void> {
    const full = this.#prefix + keyArg(key);
    await this.#send(['DEL', full], full);
  }
}

export type { Algorithm };
