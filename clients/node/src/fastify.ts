import { checkAlgorithm, checkOptions, checkOptionType, senderFor, type Algorithm, type RedisClientLike } from './command.js';
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

/**
 * The options of @fastify/rate-limit that count requests past the limit,
 * which the module does not do (a refused request changes nothing); null
 * when there are none. `ban: 0` (403 instead of 429 from the first refused
 * request) works.
 */
function unsupported(params: PluginParams): Error | null {
  const found: string[] = [];
  if (params.continueExceeding) found.push('continueExceeding (a refused request restarts the window)');
  if (params.exponentialBackoff) found.push('exponentialBackoff (each refused request doubles the window)');
  if (typeof params.ban === 'number' && params.ban > 0) found.push(`ban: ${params.ban} (counts refused requests; ban: 0 works)`);
  if (found.length === 0) return null;
  return new Error(
    `redis-throttle: the fastify store does not support ${found.join(', ')}: the module never counts a refused request. See the package README.`,
  );
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
  });
  checkOptionType(options.prefix, 'string', 'prefix');
  checkOptionType(options.clock, 'function', 'clock');
  senderFor(client); // a wrong client fails here, not at the plugin's registration
  const algorithm = checkAlgorithm(options.algorithm ?? 'fixed');
  const basePrefix = options.prefix ?? 'throttle:fastify:';
  const clock = options.clock;

  class ThrottleFastifyStore implements FastifyStore {
    readonly #throttle: Throttle;
    /** Options this store cannot honour: every call fails with this error. */
    readonly #refused: Error | null;

    /**
     * The plugin constructs the global store with its global options, and a
     * child for each route with a limit of its own. A store that would serve
     * requests under options it cannot honour refuses them at once; the
     * global store under `global: false` serves only createRateLimit(), and
     * fails there instead, so that routes can turn such an option off.
     */
    constructor(params: PluginParams & { global?: boolean } = {}, prefix?: string) {
      this.#refused = unsupported(params);
      if (this.#refused && (prefix !== undefined || params.global !== false)) throw this.#refused;
      this.#throttle = new Throttle(client, { prefix: prefix ?? basePrefix });
    }

    #run(key: string, callback: Callback, timeWindow: number, max: number, cost: number): void {
      if (this.#refused) {
        callback(this.#refused);
        return;
      }
      if (max < 1) {
        // max 0 refuses everything: there is nothing to count.
        callback(null, { current: cost === 0 ? 0 : 1, ttl: cost === 0 ? 0 : timeWindow });
        return;
      }
      this.#throttle.call({ algorithm, key, limit: max, period: Math.max(1, timeWindow) }, { cost, at: clock?.() }).then(
        (r: ThrottleResult) => {
          // The plugin refuses when current > max and sends ttl (ms) as the
          // reset and Retry-After: a refused request gets the time until it
          // would be admitted, an admitted one the time until the key is idle.
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
