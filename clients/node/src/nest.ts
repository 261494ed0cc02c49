import { checkAlgorithm, checkOptions, checkOptionType, type Algorithm, type RedisClientLike } from './command.js';
import { Throttle } from './throttle.js';

export interface NestStorageOptions {
  /** `sliding-exact` (default: like Nest's own storage, every hit counts for `ttl` after it), `sliding`, `fixed`, `token` or `leaky`. */
  algorithm?: Algorithm;
  /** Put before every key (Nest's keys are hashes of the route, throttler and tracker). Default `throttle:nest:`. */
  prefix?: string;
  /**
   * The time of each request as Unix microseconds, sent as the commands'
   * `AT` (tests, replays). Default: none, the server's clock.
   */
  clock?: () => number | bigint;
}

/** @nestjs/throttler's ThrottlerStorageRecord: times in whole seconds. */
export interface ThrottlerStorageRecord {
  totalHits: number;
  timeToExpire: number;
  isBlocked: boolean;
  timeToBlockExpire: number;
}

const seconds = (ms: number) => Math.ceil(Math.max(ms, 0) / 1000);

/**
 * @nestjs/throttler (v6) storage on the module: one THROTTLE command per
 * request and throttler.
 *
 * ```ts
 * ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: 10 }], storage: new NestStorage(redis) })
 * ```
 *
 * A refused request is blocked until the module admits again: Nest's
 * `Retry-After` is the module's `retry_after`. The module writes nothing on
 * a refused call, so `blockDuration` cannot start a longer penalty at that
 * moment (see the package README); with `blockDuration: 0` it counts and
 * blocks exactly as Nest's own storage does.
 */
export class NestStorage {
  readonly #throttle: Throttle;
  readonly #algorithm: Algorithm;
  readonly #clock: (() => number | bigint) | undefined;

  constructor(client: RedisClientLike, options: NestStorageOptions = {}) {
    checkOptions(options, ['algorithm', 'prefix', 'clock'], 'NestStorage', {
      ttl: 'give it to ThrottlerModule.forRoot({ throttlers }), which passes it to the storage',
      limit: 'give it to ThrottlerModule.forRoot({ throttlers }), which passes it to the storage',
      blockDuration: 'give it to ThrottlerModule.forRoot({ throttlers }); see the package README for what it does here',
    });
    checkOptionType(options.prefix, 'string', 'prefix');
    checkOptionType(options.clock, 'function', 'clock');
    this.#clock = options.clock;
    this.#algorithm = checkAlgorithm(options.algorithm ?? 'sliding-exact');
    this.#throttle = new Throttle(client, { prefix: options.prefix ?? 'throttle:nest:' });
  }

  async increment(key: string, ttl: number, limit: number, _blockDuration: number, _throttlerName: string): Promise<ThrottlerStorageRecord> {
    if (limit < 1) {
      // limit 0 refuses everything: there is nothing to count.
      return { totalHits: 1, timeToExpire: seconds(ttl), isBlocked: true, timeToBlockExpire: seconds(ttl) };
    }
    limit = Math.floor(limit);
    const r = await this.#throttle.call({ algorithm: this.#algorithm, key, limit, period: Math.max(1, Math.round(ttl)) }, { at: this.#clock?.() });
    return r.allowed
      ? { totalHits: Math.max(1, limit - r.remaining), timeToExpire: seconds(r.resetAfter), isBlocked: false, timeToBlockExpire: 0 }
      : { totalHits: limit + 1, timeToExpire: seconds(r.resetAfter), isBlocked: true, timeToBlockExpire: seconds(r.retryAfter) };
  }
}
