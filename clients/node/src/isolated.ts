// A connection of its own for one blocking call. A command that waits on the
// server (BLOCK) holds its connection until it answers, as BLPOP does: on a
// client the application shares, every other command queued behind it waits
// too. So a wait goes on a duplicate of the client (node-redis and ioredis
// `duplicate()`, clusters included), opened for that wait and closed when it
// answers, or on a client of a node-redis pool (`createClientPool()`), which
// gives each command a connection of its own.
import { senderFor, type RedisClientLike, type Send } from './command.js';

/** One isolated connection: `send` routes like the client's own sender. */
export interface Isolated {
  send: Send;
  /** Closes the connection (or hands the pool's client back). */
  close(): void;
  /** The connection's CLIENT ID on the node that serves `key`, for CLIENT KILL; undefined when the server would not say. */
  clientId(key: string): Promise<string | undefined>;
}

const ignore = () => {};

type Emitter = { once(event: string, listener: (...args: any[]) => void): unknown; removeListener(event: string, listener: (...args: any[]) => void): unknown };

/** Resolves when `c` emits `ready`, rejects on its first `error` or `end`. */
function ready(c: Emitter): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (error?: unknown) => {
      c.removeListener('ready', onReady);
      c.removeListener('error', onError);
      c.removeListener('end', onEnd);
      if (error === undefined) resolve();
      else reject(error);
    };
    const onReady = () => done();
    const onError = (error: unknown) => done(error);
    const onEnd = () => done(new Error('redis-throttle: the connection for the wait closed before it was ready'));
    c.once('ready', onReady);
    c.once('error', onError);
    c.once('end', onEnd);
  });
}

function handle(client: RedisClientLike, close: () => void): Isolated {
  const { send } = senderFor(client);
  let closed = false;
  return {
    send,
    close() {
      if (closed) return;
      closed = true;
      try {
        close();
      } catch {
        // already closed
      }
    },
    async clientId(key) {
      try {
        const id = await send(['CLIENT', 'ID'], key);
        return typeof id === 'number' || typeof id === 'bigint' || typeof id === 'string' ? String(id) : undefined;
      } catch {
        return undefined; // an ACL without CLIENT: no CLIENT KILL either
      }
    },
  };
}

/** Whether `client` can give a connection of its own: not a bare function that sends commands. */
export function canIsolate(client: unknown): boolean {
  if (client === null || typeof client !== 'object') return false;
  const c = client as Record<string, unknown>;
  return typeof c.duplicate === 'function' || isPool(c);
}

/** A node-redis pool (createClientPool): each command already runs on a client of its own. */
function isPool(c: Record<string, unknown>): boolean {
  return typeof c.execute === 'function' && typeof c.sendCommand === 'function' && 'totalClients' in c;
}

/** A connected duplicate of `client` (or a client of its pool), for one wait. */
export async function isolate(client: RedisClientLike): Promise<Isolated> {
  const c = client as unknown as Record<string, any>;
  if (isPool(c)) {
    // Hold one of the pool's clients for the wait: it is the connection
    // that a CLIENT KILL may end (the pool replaces it).
    return new Promise<Isolated>((resolve, reject) => {
      let release = ignore;
      const held = new Promise<void>((r) => (release = r));
      c.execute(async (pooled: RedisClientLike) => {
        resolve(handle(pooled, release));
        await held;
      }).catch(reject);
    });
  }
  if (typeof c.duplicate !== 'function') {
    throw new TypeError('redis-throttle: isolated needs a node-redis or ioredis client or cluster (one with duplicate()), not a function that sends commands');
  }
  if (typeof c.call === 'function') {
    // ioredis Redis or Cluster: a duplicate connects by itself unless the
    // original was made with lazyConnect.
    const dup = c.duplicate();
    dup.on('error', ignore);
    try {
      if (dup.status === 'wait') await dup.connect();
      else if (dup.status !== 'ready') await ready(dup);
    } catch (error) {
      dup.disconnect();
      throw error;
    }
    return handle(dup, () => dup.disconnect());
  }
  // node-redis client or cluster (v4-v6): a duplicate is made unconnected.
  const dup = c.duplicate();
  dup.on('error', ignore);
  const close = () => {
    const closing = typeof dup.destroy === 'function' ? dup.destroy() : dup.disconnect();
    if (closing && typeof closing.catch === 'function') closing.catch(ignore);
  };
  try {
    await dup.connect();
  } catch (error) {
    close();
    throw error;
  }
  return handle(dup, close);
}
