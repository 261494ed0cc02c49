// Concurrency limits: THROTTLE.ACQUIRE, RELEASE and RENEW. A key is a
// counting semaphore of `limit` slots; a caller admitted gets a lease on a
// slot, named by its token, that ends by itself unless released or renewed.
import { randomBytes } from 'node:crypto';
import {
  blockArg,
  checkOptions,
  checkOptionType,
  explain,
  integerArg,
  keyArg,
  periodArg,
  type Period,
  type RedisClientLike,
  type Send,
} from './command.js';
import { canIsolate, isolate, type Isolated } from './isolated.js';
import { parseResult, type ThrottleResult } from './reply.js';

/** What the lease commands need of their caller: how to send, the key prefix, and the client (for a connection of its own). */
export interface LeaseContext {
  send: Send;
  prefix: string;
  client: RedisClientLike | Send;
}

export interface AcquireOptions {
  /** Wait on the server up to this long for a slot (milliseconds or a period string; 0: no time-out). Waiters are let in in arrival order. */
  block?: Period;
  /** Names the lease (1 to 64 bytes). Acquiring with a token that already holds a lease renews it. Default: a token the server makes. */
  id?: string;
  /** The call's time as Unix microseconds instead of the server's clock (tests, replays). A call with `at` does not wait. */
  at?: number | bigint;
  /**
   * Wait on a connection of its own (a duplicate of the client, or a client
   * of a node-redis pool, opened for the wait and closed when it answers),
   * so that the client's other commands are not held up behind the wait.
   * A call first tries on the client's connection and opens one only when
   * it has to wait.
   */
  isolated?: boolean;
  /** Gives up the wait when aborted: the promise rejects with the signal's reason and no lease is left held. Needs `isolated`. */
  signal?: AbortSignal;
}

/** A refused acquisition: the five fields, `retryAfter` the milliseconds until a slot frees if nothing else happens. */
export interface LeaseRefused extends ThrottleResult {
  allowed: false;
}

/** What `acquire()` resolves to: a `Lease` when admitted (`allowed: true`), else the refusal. */
export type AcquireResult = Lease | LeaseRefused;

const ACQUIRE_OPTIONS = ['block', 'id', 'at', 'isolated', 'signal'] as const;
const ACQUIRE_HINTS = {
  cost: 'a lease is one slot; THROTTLE.ACQUIRE takes no COST',
  token: 'name the lease with id',
  lease: 'the lease is an argument: acquire(key, limit, lease, options)',
};

/** A token as the module takes it: 1 to 64 bytes. */
export function tokenArg(token: unknown, what: string): string {
  if (typeof token !== 'string') throw new TypeError(`redis-throttle: ${what} must be a string, got ${token === null ? 'null' : typeof token}`);
  const bytes = Buffer.byteLength(token);
  if (bytes < 1 || bytes > 64) throw new TypeError(`redis-throttle: ${what} must be a token of 1 to 64 bytes, got ${bytes} bytes`);
  return token;
}

function atArgs(at: number | bigint | undefined): string[] {
  return at === undefined ? [] : ['AT', integerArg(at, 'at')];
}

function text(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array) return new TextDecoder().decode(value);
  return undefined;
}

function unexpected(what: string, reply: unknown): Error {
  let shown: string;
  try {
    shown = JSON.stringify(reply, (_k, v) => (typeof v === 'bigint' ? v.toString() : v instanceof Map ? Object.fromEntries(v) : v));
  } catch {
    shown = String(reply);
  }
  return new TypeError(`redis-throttle: unexpected reply to ${what}: ${shown}`);
}

/**
 * THROTTLE.ACQUIRE's reply in every shape: RESP2 six elements (admitted:
 * the five fields and the token) or five (refused); RESP3 a map with a
 * `token` field when admitted (a node-redis object, a Map, or ioredis's flat
 * [name, value, ...] array).
 */
export function parseAcquire(reply: unknown): { result: ThrottleResult; token: string | undefined } {
  const what = 'THROTTLE.ACQUIRE';
  let token: unknown;
  let five: unknown = reply;
  if (Array.isArray(reply) && reply.length === 6 && text(reply[0]) === undefined) {
    token = reply[5]; // RESP2: the five integers, then the token
    five = reply.slice(0, 5);
  } else if (Array.isArray(reply) && reply.length === 12 && text(reply[10]) === 'token') {
    token = reply[11]; // ioredis's RESP3 map as a flat array
    five = reply.slice(0, 10);
  } else if (reply instanceof Map) {
    for (const [name, value] of reply) if (text(name) === 'token') token = value;
  } else if (reply !== null && typeof reply === 'object' && !Array.isArray(reply) && !(reply instanceof Uint8Array)) {
    token = (reply as Record<string, unknown>).token; // node-redis's RESP3 map
  }
  const result = parseResult(five, what);
  if (result.allowed !== (token !== undefined)) throw unexpected(what, reply);
  if (token === undefined) return { result, token: undefined };
  const named = text(token);
  if (named === undefined) throw unexpected(what, reply);
  return { result, token: named };
}

/** An integer reply of 1 (the token held a lease) or 0 (it did not; nothing changed). */
function held(reply: unknown, what: string): boolean {
  const n = typeof reply === 'number' ? reply : typeof reply === 'bigint' ? Number(reply) : typeof reply === 'boolean' ? +reply : Number(text(reply));
  if (n !== 0 && n !== 1) throw unexpected(what, reply);
  return n === 1;
}

async function sendVia(send: Send, key: string, args: string[]): Promise<unknown> {
  try {
    return await send(args, key);
  } catch (error) {
    throw explain(error, args[0]!);
  }
}

/**
 * A slot held: the five fields of the admitted call (`remaining`: free
 * slots after it; `resetAfter`: ms until the key's last lease ends), the
 * lease's `token`, and `release()` and `renew()`.
 */
export class Lease implements ThrottleResult {
  readonly allowed = true as const;
  readonly limit: number;
  readonly remaining: number;
  readonly retryAfter: number;
  readonly resetAfter: number;
  /** The lease's name: the `id` given, or the one the server made (32 hex digits). */
  readonly token: string;
  /** The key as given to acquire() (without the prefix). */
  readonly key: string;
  readonly #context: LeaseContext;

  constructor(context: LeaseContext, key: string, result: ThrottleResult, token: string) {
    this.#context = context;
    this.key = key;
    this.limit = result.limit;
    this.remaining = result.remaining;
    this.retryAfter = result.retryAfter;
    this.resetAfter = result.resetAfter;
    this.token = token;
  }

  /** THROTTLE.RELEASE: frees the slot. Resolves to false when the lease had already ended or been released (nothing changed). */
  release(options: { at?: number | bigint } = {}): Promise<boolean> {
    return releaseLease(this.#context, this.key, this.token, options);
  }

  /** THROTTLE.RENEW: the lease now ends `lease` from now. Resolves to false when it had already ended (acquire again). */
  renew(lease: Period, options: { at?: number | bigint } = {}): Promise<boolean> {
    return renewLease(this.#context, this.key, this.token, lease, options);
  }
}

/** THROTTLE.ACQUIRE key limit lease [ID token] [AT µs] [BLOCK ms]. */
export async function acquireLease(context: LeaseContext, key: string, limit: number, lease: Period, options: AcquireOptions = {}): Promise<AcquireResult> {
  checkOptions(options, ACQUIRE_OPTIONS, 'acquire()', ACQUIRE_HINTS);
  const full = context.prefix + keyArg(key);
  const { isolated, signal } = options;
  checkOptionType(isolated, 'boolean', 'isolated');
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new TypeError('redis-throttle: signal must be an AbortSignal');
  const head = ['THROTTLE.ACQUIRE', full, integerArg(limit, 'limit'), periodArg(lease, 'lease')];
  let id = options.id === undefined ? undefined : tokenArg(options.id, 'id');
  const at = atArgs(options.at);
  const block = options.block === undefined ? undefined : blockArg(options.block);
  if (signal && !isolated) {
    throw new TypeError('redis-throttle: signal needs isolated: true (a wait on the shared connection cannot be given up without closing that connection)');
  }
  if (isolated && !canIsolate(context.client)) {
    throw new TypeError('redis-throttle: isolated needs a node-redis or ioredis client, cluster or pool (one with duplicate()), not a function that sends commands');
  }
  signal?.throwIfAborted();
  const args = (wait?: string) => [...head, ...(id === undefined ? [] : ['ID', id]), ...at, ...(wait === undefined ? [] : ['BLOCK', wait])];
  const answer = (reply: unknown): AcquireResult => {
    const { result, token } = parseAcquire(reply);
    return token === undefined ? (result as LeaseRefused) : new Lease(context, key, result, token);
  };

  // Without a wait, or with AT (a call with AT does not wait), or on the
  // shared connection: one command.
  if (block === undefined || at.length > 0 || !isolated) return answer(await sendVia(context.send, full, args(block)));

  // Isolated: try on the shared connection first; open a connection only to wait.
  const started = Date.now();
  if (signal && id === undefined) id = randomBytes(16).toString('hex'); // known, so that an abort can release it
  const first = answer(await sendVia(context.send, full, args()));
  if (first.allowed) return first;
  let wait = block;
  if (block !== '0') {
    const left = Number(block) - (Date.now() - started);
    if (left < 1) return first;
    wait = String(left);
  }
  signal?.throwIfAborted();
  const connection = await isolate(context.client as RedisClientLike);
  try {
    const clientId = signal ? await connection.clientId(full) : undefined;
    signal?.throwIfAborted();
    const waiting = sendVia(connection.send, full, args(wait)).then(answer);
    if (!signal) return await waiting;
    return await abortable(waiting, signal, () => giveUp(context, connection, full, clientId, id!));
  } finally {
    connection.close();
  }
}

/** Settles with `waiting`, or, if `signal` aborts first, runs `cleanUp` and rejects with the signal's reason. */
function abortable<T>(waiting: Promise<T>, signal: AbortSignal, cleanUp: () => Promise<void>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const onAbort = () => {
      if (settled) return;
      settled = true;
      cleanUp().then(
        () => reject(signal.reason),
        () => reject(signal.reason),
      );
    };
    signal.addEventListener('abort', onAbort, { once: true });
    waiting.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        if (!settled) {
          settled = true;
          resolve(value);
        }
      },
      (error) => {
        signal.removeEventListener('abort', onAbort);
        if (!settled) {
          settled = true;
          reject(error);
        }
      },
    );
  });
}

/**
 * Ends an aborted wait and leaves no lease behind: CLIENT KILL of the
 * waiting connection (from the shared one, so that the server has dropped
 * the waiter before anything else this client sends), then a RELEASE of
 * the token, in case the slot came before the abort.
 */
async function giveUp(context: LeaseContext, connection: Isolated, key: string, clientId: string | undefined, token: string): Promise<void> {
  if (clientId !== undefined) {
    try {
      await context.send(['CLIENT', 'KILL', 'ID', clientId], key);
    } catch {
      // not allowed: closing the connection ends the wait too
    }
  }
  connection.close();
  await context.send(['THROTTLE.RELEASE', key, token], key);
}

/** THROTTLE.RELEASE key token [AT µs]: true when the token held a lease (its slot is free now). */
export async function releaseLease(context: LeaseContext, key: string, token: string, options: { at?: number | bigint } = {}): Promise<boolean> {
  checkOptions(options, ['at'], 'release()');
  const full = context.prefix + keyArg(key);
  const args = ['THROTTLE.RELEASE', full, tokenArg(token, 'token'), ...atArgs(options.at)];
  return held(await sendVia(context.send, full, args), 'THROTTLE.RELEASE');
}

/** THROTTLE.RENEW key token lease [AT µs]: true when the token held a lease (it now ends `lease` from now). */
export async function renewLease(context: LeaseContext, key: string, token: string, lease: Period, options: { at?: number | bigint } = {}): Promise<boolean> {
  checkOptions(options, ['at'], 'renew()');
  const full = context.prefix + keyArg(key);
  const args = ['THROTTLE.RENEW', full, tokenArg(token, 'token'), periodArg(lease, 'lease'), ...atArgs(options.at)];
  return held(await sendVia(context.send, full, args), 'THROTTLE.RENEW');
}

/** withLease() found no free slot in time: `result` is the refusal (`retryAfter`: ms until a slot frees). */
export class LeaseNotAcquiredError extends Error {
  override name = 'LeaseNotAcquiredError';
  readonly key: string;
  readonly result: LeaseRefused;
  readonly retryAfter: number;
  constructor(key: string, result: LeaseRefused, waited: string | undefined) {
    super(
      `redis-throttle: no lease on ${JSON.stringify(key)}: all ${result.limit} slots are held` +
        (waited === undefined ? ' (no block was given, so the call did not wait)' : ` after waiting ${waited} ms`) +
        `; a slot frees in ${result.retryAfter} ms if none is released first`,
    );
    this.key = key;
    this.result = result;
    this.retryAfter = result.retryAfter;
  }
}

/**
 * Acquires a lease (waiting up to `block`), runs `fn` with it, and releases
 * it when `fn` settles, whatever happens. Rejects with LeaseNotAcquiredError
 * when no slot came in time. `fn` may renew the lease for long work.
 */
export async function withLease<T>(
  context: LeaseContext,
  key: string,
  limit: number,
  lease: Period,
  fn: (lease: Lease) => T | Promise<T>,
  options: AcquireOptions = {},
): Promise<T> {
  if (typeof fn !== 'function') throw new TypeError(`redis-throttle: withLease() takes the work as a function (key, limit, lease, fn, options), got ${fn === null ? 'null' : typeof fn}`);
  checkOptions(options, ACQUIRE_OPTIONS, 'withLease()', ACQUIRE_HINTS);
  const got = await acquireLease(context, key, limit, lease, options);
  if (!got.allowed) throw new LeaseNotAcquiredError(key, got, options.block === undefined ? undefined : blockArg(options.block));
  const at = options.at === undefined ? {} : { at: options.at };
  let value: T;
  try {
    value = await fn(got);
  } catch (error) {
    // The work's error is what the caller needs; a failed release leaves the
    // lease to end by itself.
    await got.release(at).catch(() => {});
    throw error;
  }
  await got.release(at);
  return value;
}
