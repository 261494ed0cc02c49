// Replies of the THROTTLE commands in every shape a Node client hands them
// over: RESP2 arrays, RESP3 maps as node-redis objects (or Maps, with a type
// mapping), and RESP3 maps as ioredis's flat [name, value, ...] arrays.

/** The five fields every THROTTLE command answers, times in milliseconds. */
export interface ThrottleResult {
  /** The call was admitted. */
  allowed: boolean;
  /** The most units the key admits at once: FIXED and SLIDING `limit`, TOKEN and LEAKY `burst`. */
  limit: number;
  /** Units still admissible right now, after this call. */
  remaining: number;
  /** Milliseconds to wait before acting: 0 when admitted (LEAKY: the queue delay), -1 when the call can never be admitted. */
  retryAfter: number;
  /** Milliseconds until the key is idle again (its PTTL); 0 when it holds nothing. */
  resetAfter: number;
  /** With `detail`: the units the key counts now, refused and forced ones included (in a ban, those counted when it began and since). */
  hits?: number;
  /** With `detail`: milliseconds left of the key's ban; 0 when it has none. */
  banned?: number;
  /** With `detail`: milliseconds until one more unit is admissible; 0 when nothing is used (in a ban, its end). */
  nextFree?: number;
}

/** THROTTLE.ALL: admitted only if every limit admits; one result per spec, in order. */
export interface ThrottleAllResult {
  allowed: boolean;
  results: ThrottleResult[];
}

/**
 * THROTTLE.INFO's fields, camel-cased (`period_ms` becomes `periodMs`).
 * Which fields a key has depends on its algorithm (see the module's README).
 */
export interface ThrottleInfo {
  algorithm: 'fixed' | 'sliding' | 'sliding-exact' | 'token' | 'leaky' | 'lease';
  limit?: number;
  periodMs?: number;
  burst?: number;
  updatedAt?: number;
  windowStart?: number;
  previous?: number;
  current?: number;
  entries?: number;
  used?: number;
  remaining?: number;
  resetAfter?: number;
  /** A banned key: milliseconds left of the ban, its length, and the units it counts. */
  banned?: number;
  banLength?: number;
  hits?: number;
  /** A lease key: the leases held now. */
  holders?: number;
  /** A lease key: each lease held, the earliest end first (`endsAt` in Unix µs, `endsAfter` in ms). */
  leases?: { token: string; endsAt: number; endsAfter: number }[];
}

const FIELDS = ['allowed', 'limit', 'remaining', 'retry_after', 'reset_after'] as const;
/** The three fields DETAIL adds after the five. */
const DETAIL_FIELDS = ['hits', 'banned', 'next_free'] as const;
const ALL_FIELDS = [...FIELDS, ...DETAIL_FIELDS] as const;

function unexpected(what: string, reply: unknown): Error {
  let shown: string;
  try {
    shown = JSON.stringify(reply, (_k, v) => (typeof v === 'bigint' ? v.toString() : v));
  } catch {
    shown = String(reply);
  }
  return new TypeError(`redis-throttle: unexpected reply to ${what}: ${shown}`);
}

function text(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array) return new TextDecoder().decode(value);
  return String(value);
}

function integer(value: unknown, what: string, reply: unknown): number {
  const n = typeof value === 'number' ? value : Number(text(value));
  if (!Number.isSafeInteger(n)) throw unexpected(what, reply);
  return n;
}

/** A RESP3 map in any of its shapes, as [name, value] pairs; null for anything else. */
function mapEntries(reply: unknown): [string, unknown][] | null {
  if (reply instanceof Map) return [...reply].map(([k, v]) => [text(k), v]);
  if (Array.isArray(reply)) {
    // ioredis: a flat [name, value, ...] array; its names are strings, where
    // a RESP2 reply starts with an integer.
    if (reply.length % 2 !== 0 || reply.length === 0) return null;
    const first = reply[0];
    if (typeof first !== 'string' && !(first instanceof Uint8Array)) return null;
    const pairs: [string, unknown][] = [];
    for (let i = 0; i < reply.length; i += 2) pairs.push([text(reply[i]), reply[i + 1]]);
    return pairs;
  }
  if (reply !== null && typeof reply === 'object' && !(reply instanceof Uint8Array)) {
    return Object.entries(reply);
  }
  return null;
}

function flag(value: unknown, what: string, reply: unknown): boolean {
  if (typeof value === 'boolean') return value;
  const n = integer(value, what, reply);
  if (n !== 0 && n !== 1) throw unexpected(what, reply);
  return n === 1;
}

/**
 * The values of a reply in ALL_FIELDS order, from any of its shapes: five,
 * or eight with DETAIL; null when it is neither.
 */
function replyValues(reply: unknown): unknown[] | null {
  if (Array.isArray(reply)) {
    if (reply.length === 5 || (reply.length === 8 && typeof reply[0] !== 'string' && !(reply[0] instanceof Uint8Array))) return reply; // RESP2
    // ioredis's RESP3 map: the module sends the fields in this order.
    for (const fields of [FIELDS, ALL_FIELDS]) {
      if (reply.length === 2 * fields.length && fields.every((name, i) => reply[2 * i] === name)) return fields.map((_, i) => reply[2 * i + 1]);
    }
  } else if (reply !== null && typeof reply === 'object' && !(reply instanceof Map) && !(reply instanceof Uint8Array)) {
    // node-redis's RESP3 map (an object, with a null prototype)
    const map = reply as Record<string, unknown>;
    if (FIELDS.every((name) => name in map)) return ('hits' in map ? ALL_FIELDS : FIELDS).map((name) => map[name]);
  }
  const entries = mapEntries(reply);
  if (!entries) return null;
  const byName = new Map(entries);
  if (!FIELDS.every((name) => byName.has(name))) return null;
  return (byName.has('hits') ? ALL_FIELDS : FIELDS).map((name) => byName.get(name));
}

/** One reply: an array of five (DETAIL: eight) integers or a map of those fields. */
export function parseResult(reply: unknown, what = 'a THROTTLE command'): ThrottleResult {
  const values = replyValues(reply);
  if (!values) throw unexpected(what, reply);
  const result: ThrottleResult = {
    allowed: flag(values[0], what, reply),
    limit: integer(values[1], what, reply),
    remaining: integer(values[2], what, reply),
    retryAfter: integer(values[3], what, reply),
    resetAfter: integer(values[4], what, reply),
  };
  if (values.length === 8) {
    result.hits = integer(values[5], what, reply);
    result.banned = integer(values[6], what, reply);
    result.nextFree = integer(values[7], what, reply);
  }
  return result;
}

/** THROTTLE.ALL: `allowed` (an integer, or a boolean in RESP3), then one reply per spec. */
export function parseAllResult(reply: unknown, specs: number): ThrottleAllResult {
  if (!Array.isArray(reply) || reply.length !== specs + 1) throw unexpected('THROTTLE.ALL', reply);
  return {
    allowed: flag(reply[0], 'THROTTLE.ALL', reply),
    results: reply.slice(1).map((r) => parseResult(r, 'THROTTLE.ALL')),
  };
}

const camel = (name: string) => name.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());

/** THROTTLE.INFO: field-value pairs (RESP2 array or RESP3 map), or nil for a missing key. */
export function parseInfo(reply: unknown): ThrottleInfo | null {
  if (reply === null || reply === undefined) return null;
  const entries = mapEntries(reply);
  if (!entries) throw unexpected('THROTTLE.INFO', reply);
  const info: Record<string, unknown> = {};
  for (const [name, value] of entries) {
    info[camel(name)] = name === 'algorithm' ? text(value) : name === 'leases' ? parseLeases(value, reply) : integer(value, 'THROTTLE.INFO', reply);
  }
  if (typeof info.algorithm !== 'string') throw unexpected('THROTTLE.INFO', reply);
  return info as unknown as ThrottleInfo;
}

/** THROTTLE.INFO's `leases` on a lease key: [[token, ends_at µs, ms left], ...]. */
function parseLeases(value: unknown, reply: unknown): { token: string; endsAt: number; endsAfter: number }[] {
  if (!Array.isArray(value)) throw unexpected('THROTTLE.INFO', reply);
  return value.map((lease) => {
    if (!Array.isArray(lease) || lease.length !== 3) throw unexpected('THROTTLE.INFO', reply);
    return { token: text(lease[0]), endsAt: integer(lease[1], 'THROTTLE.INFO', reply), endsAfter: integer(lease[2], 'THROTTLE.INFO', reply) };
  });
}
