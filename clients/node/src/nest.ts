import { checkAlgorithm, checkOptions, checkOptionType, type Algorithm, type RedisClientLike } from './command.js';
import type { ThrottleResult } from './reply.js';
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

/** A window that never refuses: it only opens at the first hit and ends ttl later (Nest's record, `timeToExpire`). */
const WINDOW_LIMIT = 10 ** 15;

/**
 * @nestjs/throttler (v6) storage on the module, answering as Nest's own
 * in-memory ThrottlerStorageService does on the same hits.
 *
 * ```ts
 * ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: 10 }], storage: new NestStorage(redis) })
 * ```
 *
 * Per request and throttler, two commands sent together: one that counts
 * the hit and bans (`THROTTLE.ALL` of the limit, with `BAN blockDuration`,
 * and of a log of the hits that outlives the ban, so that `totalHits`
 * decays during a block as Nest's does), and the window Nest reports as
 * `timeToExpire` (a fixed window opened by the first hit after the last
 * one ended). With `blockDuration: 0`, one command and the window.
 */
export class NestStorage {
  readonly #throttle: Throttle;
  readonly #algorithm: Algorithm;
  readonly #clock: (() => number | bigint) | undefined;

  constructor(client: RedisClientLike, options: NestStorageOptions = {}) {
    checkOptions(options, ['algorithm', 'prefix', 'clock'], 'NestStorage', {
      ttl: 'give it to ThrottlerModule.forRoot({ throttlers }), which passes it to the storage',
      limit: 'give it to ThrottlerModule.forRoot({ throttlers }), which passes it to the storage',
      blockDuration: 'give it to ThrottlerModule.forRoot({ throttlers }), which passes it to the storage',
    });
    checkOptionType(options.prefix, 'string', 'prefix');
    checkOptionType(options.clock, 'function', 'clock');
    this.#clock = options.clock;
    this.#algorithm = checkAlgorithm(options.algorithm ?? 'sliding-exact');
    this.#throttle = new Throttle(client, { prefix: options.prefix ?? 'throttle:nest:' });
  }

  async increment(key: string, ttl: number, limit: number, blockDuration: number, _throttlerName: string): Promise<ThrottlerStorageRecord> {
    if (limit < 1) {
      // limit 0 refuses everything: there is nothing to count.
      return { totalHits: 1, timeToExpire: seconds(ttl), isBlocked: true, timeToBlockExpire: seconds(ttl) };
    }
    limit = Math.floor(limit);
    const period = Math.max(1, Math.round(ttl));
    const at = this.#clock?.();
    // One hash slot for a key's three parts (Redis Cluster).
    const base = `{${key}}`;
    const window = this.#throttle.call({ algorithm: 'fixed', key: `${base}:window`, limit: WINDOW_LIMIT, period }, { at });
    const hit = blockDuration > 0 ? this.#blocking(base, period, limit, Math.round(blockDuration), at) : this.#plain(base, period, limit, at);
    const [w, record] = await Promise.all([window, hit]);
    return { ...record, timeToExpire: seconds(w.resetAfter) };
  }

  /** blockDuration 0: Nest's incrementWithoutBlock, refused while the log is full, blocked until its oldest hit leaves. */
  async #plain(base: string, period: number, limit: number, at: number | bigint | undefined): Promise<Omit<ThrottlerStorageRecord, 'timeToExpire'>> {
    const r = await this.#throttle.call({ algorithm: this.#algorithm, key: base, limit, period }, { at, detail: true });
    return r.allowed
      ? { totalHits: r.hits ?? limit - r.remaining, isBlocked: false, timeToBlockExpire: 0 }
      : { totalHits: limit + 1, isBlocked: true, timeToBlockExpire: seconds(r.retryAfter) };
  }

  /**
   * blockDuration > 0: the hit that goes over the limit bans the key for
   * blockDuration (plain BAN: hits during the ban do not extend it), after
   * which it starts afresh. `totalHits` during the ban is what Nest's log
   * still holds: the hits before the ban (the shadow log, which the ban
   * leaves alone) and the hit that went over, until each leaves the window.
   */
  async #blocking(base: string, period: number, limit: number, ban: number, at: number | bigint | undefined): Promise<Omit<ThrottlerStorageRecord, 'timeToExpire'>> {
    const limits = [
      { algorithm: this.#algorithm, key: base, limit, period, ban },
      { algorithm: this.#algorithm, key: `${base}:log`, limit, period },
    ];
    for (let attempt = 0; ; attempt++) {
      const { allowed, results } = await this.#throttle.all(limits, { at, detail: true });
      const [meter, log] = results as [ThrottleResult, ThrottleResult];
      const hits = meter.hits ?? 0;
      if (allowed) {
        // After a ban the limit is fresh while the log may still hold hits
        // from before it: the log starts again from the limit's count.
        if ((log.hits ?? 0) !== hits) await this.#resetLog(base, period, limit, hits, at);
        return { totalHits: hits, isBlocked: false, timeToBlockExpire: 0 };
      }
      const banned = meter.banned ?? 0;
      if (banned > 0) {
        // The hit that went over came `ban - banned` ms ago: it counts until it leaves the window.
        const overAlive = banned > ban - period ? 1 : 0;
        return { totalHits: (log.hits ?? 0) + overAlive, isBlocked: true, timeToBlockExpire: seconds(banned) };
      }
      // The limit admits but the log, still full from before a ban, refused.
      if (attempt > 0) return { totalHits: hits, isBlocked: false, timeToBlockExpire: 0 };
      await this.#resetLog(base, period, limit, 0, at);
    }
  }

  async #resetLog(base: string, period: number, limit: number, hits: number, at: number | bigint | undefined): Promise<void> {
    await this.#throttle.reset(`${base}:log`);
    if (hits > 0) await this.#throttle.call({ algorithm: this.#algorithm, key: `${base}:log`, limit, period }, { at, cost: hits, force: true });
  }
}
