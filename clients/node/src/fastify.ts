import { checkAlgorithm, checkOptions, checkOptionType, senderFor, type Algorithm, type CallOptions, type RedisClientLike } from './command.js';
import type { ThrottleResult } from './reply.js';
import { Throttle } from './throttle.js';

export interface FastifyStoreOptions {
  /** `fixed` (default: the plugin's own window), `sliding`, `sliding-exact`, `token` or `leaky`. */
  algorithm?: Algorithm;
  /** Put before every key. Default `throttle:fastify:`; per-route limits add `METHOD/url-` as the plugin's own store does. */
  prefix?: string;
  /**
   * The time of each request as Unix microseconds, sent as the commands'
   * `AT` (tests, replays). Default: none, the server's clock.
   */
  clock?: () => number | bigint;
}

/** What @fastify/rate-limit passes to a store: its global options, or a route's merged with them. */
interface PluginParams {
  ban?: number;
  continueExceeding?: boolean;
  exponentialBackoff?: boolean;
  routeInfo?: { method?: string | string[]; url?: string };
}

type Callback = (error: Error | null, result?: { current: number; ttl: number }) => void;

/** The store class createFastifyStore returns: @fastify/rate-limit constructs it itself. */
export interface FastifyStoreClass {
  new (params: object): FastifyStore;
}

export interface FastifyStore {
  incr(key: string, callback: Callback, timeWindow: number, max: number): void;
  read(key: string, callback: Callback, timeWindow: number, max: number): void;
  child(routeOptions: object): FastifyStore;
}

/** The module's largest TALLY cap: fastify's `current` counts every refused request. */
const TALLY_CAP = 10 ** 15;
/** The longest ban the module takes (3650 days): exponentialBackoff's doubling stops there (the plugin's own store stops at 2^53 - 1 ms). */
const MAX_BAN_MS = 3650 * 86_400_000;

/**
 * The penalty options a store's requests carry, from the plugin's options:
 * none (a refused request changes nothing), or TALLY and DETAIL so that
 * `current` counts refused requests as the plugin's own stores do, with
 * `BAN timeWindow RENEW` for continueExceeding (each refused request
 * restarts the window) or `BAN timeWindow BACKOFF` for exponentialBackoff
 * (each refused request doubles it). `ban: 0` needs none: the first refused
 * request is already past max + 0.
 */
function penaltiesFor(params: PluginParams): { renew: boolean; backoff: boolean } | null {
  const renew = params.continueExceeding === true;
  const backoff = !renew && params.exponentialBackoff === true;
  if (!renew && !backoff && !(typeof params.ban === 'number' && params.ban > 0)) return null;
  return { renew, backoff };
}

/**
 * A store class for @fastify/rate-limit (v10, v11) on the module, bound to
 * `client` (the plugin constructs the store from its own options, which do not
 * carry a client). Pass it as `store:`.
 *
 * ```js
 * await fastify.register(rateLimit, { max: 100, timeWindow: '1 minute', store: createFastifyStore(redis) })
 * ```
 */
export function createFastifyStore(client: RedisClientLike, options: FastifyStoreOptions = {}): FastifyStoreClass {
  checkOptions(options, ['algorithm', 'prefix', 'clock'], 'createFastifyStore', {
    nameSpace: "the plugin's option for its own Redis store: give this store's prefix",
    ban: 'give it to the plugin, which passes it to the store',
    continueExceeding: 'give it to the plugin, which passes it to the store',
    exponentialBackoff: 'give it to the plugin, which passes it to the store',
  });
  checkOptionType(options.prefix, 'string', 'prefix');
  checkOptionType(options.clock, 'function', 'clock');
  senderFor(client); // a wrong client fails here, not at the plugin's registration
  const algorithm = checkAlgorithm(options.algorithm ?? 'fixed');
  const basePrefix = options.prefix ?? 'throttle:fastify:';
  const clock = options.clock;

  class ThrottleFastifyStore implements FastifyStore {
    readonly #throttle: Throttle;
    /** What a refused request does to the key (the plugin's ban, continueExceeding, exponentialBackoff); null: nothing. */
    readonly #penalties: { renew: boolean; backoff: boolean } | null;

    /** The plugin constructs the global store with its global options, and a child for each route with a limit of its own. */
    constructor(params: PluginParams = {}, prefix?: string) {
      this.#penalties = penaltiesFor(params);
      this.#throttle = new Throttle(client, { prefix: prefix ?? basePrefix });
    }

    #run(key: string, callback: Callback, timeWindow: number, max: number, cost: number): void {
      if (max < 1) {
        // max 0 refuses everything: there is nothing to count.
        callback(null, { current: cost === 0 ? 0 : 1, ttl: cost === 0 ? 0 : timeWindow });
        return;
      }
      const period = Math.max(1, Math.round(timeWindow));
      const penalties = this.#penalties;
      const options: CallOptions = { cost, at: clock?.() };
      if (penalties) {
        options.detail = true;
        if (cost > 0) {
          options.tally = TALLY_CAP;
          if (penalties.renew || penalties.backoff) options.ban = Math.min(period, MAX_BAN_MS);
          if (penalties.renew) options.renew = true;
          if (penalties.backoff) options.backoff = MAX_BAN_MS;
        }
      }
      this.#throttle.call({ algorithm, key, limit: max, period }, options).then(
        (r: ThrottleResult) => {
          // The plugin refuses when current > max (403 past max + ban) and
          // sends ttl (ms) as the reset and Retry-After: a refused request
          // gets the time until it would be admitted (or its ban ends), an
          // admitted one the time until the key is idle.
          if (penalties && r.hits !== undefined) {
            // The key's hits count refused requests too, as the plugin's
            // counter does; a bucket (token, leaky) keeps no more than its
            // burst, so a refused request is at least max + 1 there.
            callback(null, { current: r.allowed ? r.hits : Math.max(r.hits, max + 1), ttl: r.allowed ? r.resetAfter : Math.max(r.retryAfter, r.banned ?? 0, 0) });
            return;
          }
          const current = r.allowed ? Math.max(0, max - r.remaining) : max + 1;
          callback(null, { current, ttl: r.allowed ? r.resetAfter : Math.max(r.retryAfter, 0) });
        },
        (error: Error) => callback(error),
      );
    }

    /** One request: THROTTLE.<ALGORITHM> key max timeWindow. */
    incr(key: string, callback: Callback, timeWindow: number, max: number): void {
      this.#run(key, callback, timeWindow, max, 1);
    }

    /** A peek (COST 0) for `{ increment: false }`: changes nothing. */
    read(key: string, callback: Callback, timeWindow: number, max: number): void {
      this.#run(key, callback, timeWindow, max, 0);
    }

    /** A route's own limit (`config.rateLimit`): its own keys, as the plugin's Redis store keeps them. */
    child(routeOptions: PluginParams): FastifyStore {
      const { method, url } = routeOptions.routeInfo ?? {};
      return new ThrottleFastifyStore(routeOptions, method && url ? `${basePrefix}${method}${url}-` : basePrefix);
    }
  }
  return ThrottleFastifyStore;
}
