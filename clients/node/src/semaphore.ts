// redis-semaphore's Semaphore on the module's lease commands: the same
// constructor, options, methods and errors, with THROTTLE.ACQUIRE (waiting
// on the server, in arrival order, instead of polling), THROTTLE.RENEW for
// the refresh and THROTTLE.RELEASE, each one command.
import { randomUUID } from 'node:crypto';
import { checkOptions, checkOptionType, senderFor, type RedisClientLike, type Send } from './command.js';
import { canIsolate } from './isolated.js';
import { acquireLease, releaseLease, renewLease, tokenArg, type LeaseContext } from './lease.js';

/** The lease ended while the semaphore believed it held it (found by the refresh). */
export class LostLockError extends Error {
  override name = 'LostLockError';
}

/** acquire() found no free slot within acquireTimeout. */
export class TimeoutError extends Error {
  override name = 'TimeoutError';
}

/** redis-semaphore's defaults. */
export const defaultTimeoutOptions = {
  lockTimeout: 10000,
  acquireTimeout: 10000,
  acquireAttemptsLimit: Number.POSITIVE_INFINITY,
  retryInterval: 10,
};

export interface TimeoutOptions {
  /** Milliseconds the slot is held unless refreshed or released (the lease). Default 10000. */
  lockTimeout?: number;
  /** Milliseconds acquire() waits for a slot (on the server, no polling); Infinity: no time-out. Default 10000. */
  acquireTimeout?: number;
  /** 1: try once, without waiting. Any other value: wait up to acquireTimeout (there are no further attempts to count). */
  acquireAttemptsLimit?: number;
  /** Accepted for compatibility and unused: nothing polls (a waiter is let in by the server when a slot frees). */
  retryInterval?: number;
  /** Milliseconds between automatic refreshes (THROTTLE.RENEW) while acquired; 0: none. Default: 80% of lockTimeout. */
  refreshInterval?: number;
}

/** Called, with the semaphore as `this`, when a refresh finds the slot lost. */
export interface LockLostCallback {
  (this: Lock, err: LostLockError): void;
}

export interface LockOptions extends TimeoutOptions {
  /** @deprecated redis-semaphore's: give `identifier` and `acquiredExternally: true`. */
  externallyAcquiredIdentifier?: string;
  /** @deprecated redis-semaphore's: give `identifier`. */
  identifierSuffix?: string;
  /** The lease's token (1 to 64 bytes). Default: crypto.randomUUID(). Holders must not share one. */
  identifier?: string;
  /** With `identifier`: acquire() renews the lease another process took (THROTTLE.RENEW) instead of taking a slot. */
  acquiredExternally?: true;
  /** Default: throws the LostLockError (an unhandled rejection), as redis-semaphore does. */
  onLockLost?: LockLostCallback;
}

const OPTIONS = [
  'lockTimeout',
  'acquireTimeout',
  'acquireAttemptsLimit',
  'retryInterval',
  'refreshInterval',
  'onLockLost',
  'identifier',
  'acquiredExternally',
  'externallyAcquiredIdentifier',
  'identifierSuffix',
] as const;

function defaultOnLockLost(err: LostLockError): never {
  throw err;
}

function milliseconds(value: unknown, name: string, { min, infinite }: { min: number; infinite: boolean }): number {
  if (infinite && value === Number.POSITIVE_INFINITY) return value;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < min) {
    throw new TypeError(
      `redis-throttle: ${name} must be an integer of milliseconds from ${min}${infinite ? ' (or Infinity)' : ''}, got ${typeof value === 'number' ? value : JSON.stringify(value)}`,
    );
  }
  return value;
}

/**
 * redis-semaphore's Lock: the life of one holder (acquire, automatic
 * refresh, release, loss), over three operations a subclass provides.
 */
export abstract class Lock {
  protected abstract _kind: string;
  protected abstract _key: string;
  protected _identifier: string;
  protected _acquireOptions: { identifier: string; lockTimeout: number; acquireTimeout: number; acquireAttemptsLimit: number; retryInterval: number };
  protected _refreshTimeInterval: number;
  protected _refreshInterval?: ReturnType<typeof setInterval>;
  protected _refreshing = false;
  protected _acquired = false;
  protected _acquiredExternally = false;
  protected _onLockLost: LockLostCallback;
  /** Date.now() when the latest acquire or refresh that held the slot was sent: the lease lasts at least lockTimeout from then. */
  protected _heldSince = 0;

  /** Takes a slot; true when taken (waiting up to acquireTimeout). */
  protected abstract _acquire(abortSignal?: AbortSignal): Promise<boolean>;
  /** Extends the lease; true when it was still held. */
  protected abstract _refresh(): Promise<boolean>;
  /** Gives the slot back. */
  protected abstract _release(): Promise<void>;

  constructor(options: LockOptions = defaultTimeoutOptions) {
    checkOptions(options, OPTIONS, 'Semaphore', {
      prefix: 'the key is semaphore:<key>, as redis-semaphore makes it; an ioredis keyPrefix applies before it',
    });
    const lockTimeout = milliseconds(options.lockTimeout ?? defaultTimeoutOptions.lockTimeout, 'lockTimeout', { min: 1, infinite: false });
    const acquireTimeout = milliseconds(options.acquireTimeout ?? defaultTimeoutOptions.acquireTimeout, 'acquireTimeout', { min: 0, infinite: true });
    const acquireAttemptsLimit = options.acquireAttemptsLimit ?? defaultTimeoutOptions.acquireAttemptsLimit;
    if (acquireAttemptsLimit !== Number.POSITIVE_INFINITY && !(Number.isSafeInteger(acquireAttemptsLimit) && acquireAttemptsLimit >= 1)) {
      throw new TypeError(`redis-throttle: acquireAttemptsLimit must be a positive integer or Infinity, got ${acquireAttemptsLimit}`);
    }
    const retryInterval = options.retryInterval ?? defaultTimeoutOptions.retryInterval;
    if (typeof retryInterval !== 'number' || !(retryInterval >= 0)) {
      throw new TypeError(`redis-throttle: retryInterval must be a number of milliseconds (it is unused: nothing polls), got ${retryInterval}`);
    }
    const refreshInterval = milliseconds(options.refreshInterval ?? Math.round(lockTimeout * 0.8), 'refreshInterval', { min: 0, infinite: false });
    checkOptionType(options.onLockLost, 'function', 'onLockLost');
    const { identifier, acquiredExternally, externallyAcquiredIdentifier, identifierSuffix } = options;
    checkOptionType(identifierSuffix, 'string', 'identifierSuffix');
    if (acquiredExternally !== undefined && acquiredExternally !== true) {
      throw new TypeError('redis-throttle: acquiredExternally must be true (with identifier) or not given');
    }
    if (acquiredExternally && identifier === undefined) {
      throw new TypeError('redis-throttle: acquiredExternally: true needs the identifier of the lease taken elsewhere');
    }
    if (externallyAcquiredIdentifier !== undefined && (identifier !== undefined || acquiredExternally)) {
      throw new TypeError('redis-throttle: give either externallyAcquiredIdentifier (deprecated) or identifier with acquiredExternally: true, not both');
    }
    const chosen = identifier ?? externallyAcquiredIdentifier ?? (identifierSuffix ? `${randomUUID()}-${identifierSuffix}` : randomUUID());
    this._identifier = tokenArg(chosen, identifier !== undefined ? 'identifier' : externallyAcquiredIdentifier !== undefined ? 'externallyAcquiredIdentifier' : 'identifier (with identifierSuffix)');
    this._acquiredExternally = acquiredExternally === true || externallyAcquiredIdentifier !== undefined;
    this._acquireOptions = { identifier: this._identifier, lockTimeout, acquireTimeout, acquireAttemptsLimit, retryInterval };
    this._refreshTimeInterval = refreshInterval;
    this._onLockLost = options.onLockLost ?? defaultOnLockLost;
  }

  /** The lease's token. */
  get identifier(): string {
    return this._identifier;
  }

  /** Whether this holder believes it holds its slot (false once released or found lost). */
  get isAcquired(): boolean {
    return this._acquired;
  }

  #startRefresh(): void {
    this.stopRefresh();
    this._refreshInterval = setInterval(this.#processRefresh, this._refreshTimeInterval);
    this._refreshInterval.unref();
  }

  /** Stops the automatic refresh: the lease then ends lockTimeout after the latest refresh unless released. */
  stopRefresh(): void {
    if (this._refreshInterval) {
      clearInterval(this._refreshInterval);
      this._refreshInterval = undefined;
    }
  }

  #lost(cause?: unknown): void {
    this._acquired = false;
    this.stopRefresh();
    const error = new LostLockError(`Lost ${this._kind} for key ${this._key}`, cause === undefined ? undefined : { cause });
    this._onLockLost(error);
  }

  #processRefresh = async (): Promise<void> => {
    if (this._refreshing) return;
    this._refreshing = true;
    try {
      const sent = Date.now();
      let refreshed: boolean;
      try {
        refreshed = await this._refresh();
      } catch (error) {
        // Not an answer (the server unreachable, say): try again at the next
        // interval, unless the lease has ended by now whatever the server did.
        if (!this._acquired) return;
        if (Date.now() - this._heldSince < this._acquireOptions.lockTimeout) return;
        this.#lost(error);
        return;
      }
      if (refreshed) {
        this._heldSince = sent;
        return;
      }
      if (!this._acquired) return; // released on purpose while this refresh was under way
      this.#lost();
    } finally {
      this._refreshing = false;
    }
  };

  /** Takes a slot, waiting up to acquireTimeout; rejects with TimeoutError when none came (or with the signal's reason when aborted). */
  async acquire(abortSignal?: AbortSignal): Promise<void> {
    if (!(await this.tryAcquire(abortSignal))) {
      throw new TimeoutError(`Acquire ${this._kind} ${this._key} timeout`);
    }
  }

  /** Takes a slot, waiting up to acquireTimeout; resolves to whether it was taken. */
  async tryAcquire(abortSignal?: AbortSignal): Promise<boolean> {
    const sent = Date.now();
    const acquired = this._acquiredExternally ? await this._refresh() : await this._acquire(abortSignal);
    if (!acquired) return false;
    this._heldSince = sent;
    this._acquired = true;
    this._acquiredExternally = false;
    if (this._refreshTimeInterval > 0) this.#startRefresh();
    return true;
  }

  /** Renews the lease now (THROTTLE.RENEW for lockTimeout); false when it was no longer held (the semaphore is then not acquired). */
  async refresh(): Promise<boolean> {
    const sent = Date.now();
    const held = await this._refresh();
    if (held) this._heldSince = sent;
    else if (this._acquired) {
      this._acquired = false;
      this.stopRefresh();
    }
    return held;
  }

  /** Gives the slot back (a lease already ended or never taken: nothing happens). */
  async release(): Promise<void> {
    this.stopRefresh();
    if (this._acquired || this._acquiredExternally) await this._release();
    this._acquired = false;
    this._acquiredExternally = false;
  }
}

/**
 * redis-semaphore's Semaphore: at most `limit` holders of `key` at once,
 * on THROTTLE.ACQUIRE, RENEW and RELEASE (the key `semaphore:<key>`, a
 * lease key). Takes an ioredis (v5, v6) or node-redis (v4-v6) client,
 * cluster or pool.
 *
 * ```js
 * const semaphore = new Semaphore(redis, 'vendor-api', 3, { lockTimeout: 30_000 });
 * await semaphore.acquire();
 * try { ... } finally { await semaphore.release(); }
 * ```
 */
export class Semaphore extends Lock {
  protected _kind = 'semaphore';
  protected _key: string;
  protected _limit: number;
  readonly #context: LeaseContext;

  constructor(client: RedisClientLike | Send, key: string, limit: number, options?: LockOptions) {
    super(options);
    if (!client) throw new TypeError('redis-throttle: Semaphore: "client" is required');
    if (!key) throw new TypeError('redis-throttle: Semaphore: "key" is required');
    if (typeof key !== 'string') throw new TypeError(`redis-throttle: Semaphore: "key" must be a string, got ${typeof key}`);
    if (!limit) throw new TypeError('redis-throttle: Semaphore: "limit" is required (the most holders at once, an integer from 1 to 100000)');
    if (typeof limit !== 'number') throw new TypeError(`redis-throttle: Semaphore: "limit" must be a number (an integer from 1 to 100000), got ${typeof limit}`);
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > 100000) {
      throw new TypeError(`redis-throttle: Semaphore: "limit" must be an integer from 1 to 100000, got ${limit}`);
    }
    const { send, keyPrefix } = senderFor(client);
    this.#context = { send, prefix: keyPrefix, client };
    this._key = `semaphore:${key}`;
    this._limit = limit;
  }

  protected async _acquire(abortSignal?: AbortSignal): Promise<boolean> {
    const { identifier, lockTimeout, acquireTimeout, acquireAttemptsLimit } = this._acquireOptions;
    // No polling: one call that waits on the server, on a connection of
    // its own (the client's other commands go on), up to acquireTimeout.
    const waits = acquireAttemptsLimit > 1 && acquireTimeout > 0;
    const block = !waits ? undefined : acquireTimeout === Number.POSITIVE_INFINITY ? 0 : acquireTimeout;
    const isolated = block !== undefined && canIsolate(this.#context.client);
    abortSignal?.throwIfAborted();
    const got = await acquireLease(this.#context, this._key, this._limit, lockTimeout, {
      id: identifier,
      block,
      isolated,
      signal: isolated ? abortSignal : undefined,
    });
    return got.allowed;
  }

  protected async _refresh(): Promise<boolean> {
    try {
      return await renewLease(this.#context, this._key, this._identifier, this._acquireOptions.lockTimeout);
    } catch (error) {
      // The key holds something else now (it was deleted and reused): no
      // lease of ours is in it.
      if (error instanceof Error && /^WRONGTYPE/.test(error.message)) return false;
      throw error;
    }
  }

  protected async _release(): Promise<void> {
    await releaseLease(this.#context, this._key, this._identifier);
  }
}
