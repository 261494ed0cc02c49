"""Storages for the `limits` library on the THROTTLE commands.

Defining these classes registers their schemes with limits (its storage
classes register the schemes they name in STORAGE_SCHEME), so that
``limits.storage.storage_from_string("throttle://host:port")``, Flask-Limiter's
``storage_uri`` and SlowAPI's ``Limiter(storage_uri=...)`` find them:

- ``throttle://[user:password@]host:port[/db]``: ThrottleStorage (redis.Redis)
- ``throttles://...``: the same over TLS (limits' ``rediss://``; ``?ssl_ca_certs=...``)
- ``throttle+unix:///path/to/socket[?db=n]``: the same on a unix socket (limits' ``redis+unix://``)
- ``throttle+cluster://host:port[,host:port...]``: ThrottleClusterStorage (redis.cluster.RedisCluster);
  over TLS with the option ``ssl=True``, as limits' ``redis+cluster://``
- ``async+throttle://...``, ``async+throttles://...``, ``async+throttle+unix://...``,
  ``async+throttle+cluster://...``: the asyncio twins

Every storage call is one command: the window strategies' decisions are
THROTTLE.FIXED, THROTTLE.SLIDING ... EXACT and THROTTLE.SLIDING ... FLOOR;
their statistics THROTTLE.INFO and PTTL, or a peek (COST 0 ... DETAIL). No script, no
read-then-write. The package README lists where this differs from limits'
own Redis storage.
"""

from __future__ import annotations

import time
from typing import Any, List, Optional, Tuple

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from limits._storage_scheme import parse_storage_uri
from limits.aio.storage import base as aio_base
from limits.errors import ConfigurationError
from limits.storage import base

from ._core import Decision, info_from_reply, period_arg, raise_if_module_missing

#: THROTTLE.FIXED's largest limit: with it FIXED is an unbounded counter, limits' ``incr``.
UNBOUNDED = 10**15
PREFIX = "THROTTLE"


# ------------------------------------------------------------ commands and replies, shared by sync and async

def _incr(key: str, expiry: int, amount: int) -> Tuple[Any, ...]:
    return ("THROTTLE.FIXED", key, UNBOUNDED, period_arg(expiry), "COST", amount)


def _count(reply: Any) -> int:
    decision = Decision.from_reply(reply)
    return decision.limit - decision.remaining


def _used(reply: Any) -> int:
    info = info_from_reply(reply)
    return int(info["used"]) if info else 0


def _expiry(pttl: Any) -> float:
    return time.time() + max(int(pttl), 0) / 1000


def _sliding(key: str, limit: int, expiry: int, amount: int, exact: bool) -> Tuple[Any, ...]:
    """A hit (or with amount 0 a peek) of limits' moving window (``exact``) or sliding window counter.

    The counter runs with FLOOR: the previous window's weighted share counts in whole units, rounded down, as
    limits counts it, so a client keeping exactly to the rate is admitted every time, as with limits' own
    storages.
    """
    return ("THROTTLE.SLIDING", key, limit, period_arg(expiry), "COST", amount, "EXACT" if exact else "FLOOR")


def _peek(key: str, limit: int, expiry: int, exact: bool) -> Tuple[Any, ...]:
    """A COST 0 peek with DETAIL: what the key counts now, and when one more unit is admissible."""
    return _sliding(key, limit, expiry, 0, exact) + ("DETAIL",)


def _allowed(reply: Any) -> bool:
    return Decision.from_reply(reply).allowed


def _moving_window(reply: Any, expiry: int) -> Tuple[float, int]:
    """(start, entries) for limits' moving window from a COST 0 ... EXACT DETAIL peek.

    limits' reset time is ``start + expiry``, the moment the oldest entry still in the window leaves it: the
    peek's ``next_free`` is exactly how long that is from now.
    """
    decision = Decision.from_reply(reply)
    count = decision.limit - decision.remaining
    now = time.time()
    if count <= 0 or decision.next_free is None:
        return now, 0
    return now + decision.next_free - expiry, count


def _sliding_window(reply: Any, expiry: int) -> Tuple[int, float, int, float]:
    """limits' (previous count, previous TTL, current count, current TTL) from a COST 0 ... FLOOR DETAIL peek.

    limits computes the remaining units as ``limit - floor(previous * previous TTL / expiry + current)`` and
    the reset as ``now + min(previous TTL % (expiry / previous), current TTL % expiry)``: the time until one
    more unit is admissible. The peek (under the largest limit) gives both exactly, as the module counts
    them: ``hits`` (the units the key counts now, the previous window's share rounded down) and
    ``next_free``. They are handed over as a current window that counts ``hits`` and frees its next unit in
    ``next_free``, so limits' arithmetic gives them back. ``next_free`` is at most a period (rounded up to the
    ms, a whole period in a window's first ms): kept a ms below it, so that ``% expiry`` does not make it 0.
    """
    decision = Decision.from_reply(reply)
    used = decision.limit - decision.remaining
    if used <= 0 or not decision.next_free:
        return 0, 0.0, 0, 0.0
    return 0, 0.0, used, expiry + min(decision.next_free, expiry - 0.001)


def _pattern(prefix: str) -> str:
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in prefix)
    return f"{escaped}:*"


#: redis-py's URL scheme for each single-server scheme, as limits maps its own:
#: rediss:// is TLS, redis+unix:///path a unix socket (redis-py's unix://).
_URL_SCHEMES = {"throttle": "redis", "throttles": "rediss", "throttle+unix": "unix"}


def _redis_url(uri: str) -> str:
    """The redis-py URL for a single-server URI: ``throttles://h:p/0?ssl_ca_certs=...`` is ``rediss://h:p/0?...``."""
    scheme, separator, rest = uri.partition("://")
    bare = scheme[len("async+"):] if scheme.startswith("async+") else scheme
    if not separator or bare not in _URL_SCHEMES:
        known = ", ".join(f"{name}://" for name in _URL_SCHEMES)
        raise ConfigurationError(f"{uri!r}: a redis-throttle storage URI starts with one of {known} (or async+ ...)")
    netloc = rest.split("/", 1)[0]
    if bare == "throttle+unix" and netloc and "@" not in netloc:
        # redis-py would drop it silently: "unix://:pw/path" has no password (limits' docs show that form)
        raise ConfigurationError(
            f"{uri!r}: {scheme}:// takes a socket path, and credentials only before an @: "
            f"{scheme}://[[user]:password@]/path/to/socket[?db=n], e.g. {scheme}://:password@/path/to/socket"
        )
    return f"{_URL_SCHEMES[bare]}://{rest}"


def _cluster_options(uri: str, node: Any, options: Any) -> Any:
    """RedisCluster's arguments from ``throttle+cluster://[user:password@]host:port[,host:port...]``."""
    parsed = parse_storage_uri(uri)
    if not parsed.locations and parsed.path:
        raise ConfigurationError(
            f"{uri!r}: {parsed.scheme}:// takes host:port[,host:port...], not a socket path; a server on a unix "
            f"socket is one server: use {parsed.scheme.replace('+cluster', '+unix')}:///path/to/socket"
        )
    if parsed.query:
        raise ConfigurationError(
            f"{uri!r}: {parsed.scheme}:// takes no query options ({', '.join(sorted(parsed.query))}): "
            "pass them as storage options (Flask-Limiter's RATELIMIT_STORAGE_OPTIONS, SlowAPI's storage_options), "
            "e.g. ssl=True and ssl_ca_certs for TLS, as for limits' redis+cluster://"
        )
    if parsed.locations:
        options.setdefault("startup_nodes", [node(host, port) for host, port in parsed.locations])
    if parsed.username:
        options.setdefault("username", parsed.username)
    if parsed.password:
        options.setdefault("password", parsed.password)
    return options


class _Keys:
    """Keys and errors, the same for the sync and async storages."""

    key_prefix: str

    @property
    def base_exceptions(self) -> Any:
        return redis.RedisError

    def prefixed_key(self, key: str) -> str:
        return f"{self.key_prefix}:{key}"

    def _sliding_key(self, key: str) -> str:
        # limits' Redis storage keeps its sliding windows apart from the key the
        # other two strategies share, under {key}: so does this one. Its windows
        # are the module's, aligned on the Unix epoch like limits' memory and
        # memcached storages (hence TimestampedSlidingWindow).
        return self.prefixed_key(f"{{{key}}}")


# ------------------------------------------------------------ sync

class ThrottleStorage(
    _Keys,
    base.Storage, base.MovingWindowSupport, base.SlidingWindowCounterSupport, base.TimestampedSlidingWindow
):
    """limits storage on the THROTTLE commands of one Redis server: ``throttle://host:port``,
    ``throttles://host:port`` (TLS) or ``throttle+unix:///path/to/socket``.

    ``key_prefix`` (default ``THROTTLE``) goes before every key, apart from
    limits' own Redis storage (``LIMITS``), whose string and list keys the
    module's types could not share. Other options go to redis.Redis.from_url
    (``protocol``, ``socket_timeout``, ...); ``connection_pool`` reuses a pool.
    """

    STORAGE_SCHEME = ["throttle", "throttles", "throttle+unix"]

    def __init__(
        self,
        uri: str,
        key_prefix: str = PREFIX,
        wrap_exceptions: bool = False,
        connection_pool: Optional[redis.ConnectionPool] = None,
        **options: Any,
    ) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        self.key_prefix = key_prefix
        self.storage = self._client(uri, connection_pool, **options)

    def _client(self, uri: str, connection_pool: Optional[redis.ConnectionPool], **options: Any) -> Any:
        if connection_pool is not None:
            return redis.Redis(connection_pool=connection_pool, **options)
        return redis.Redis.from_url(_redis_url(uri), **options)

    def _execute(self, *args: Any) -> Any:
        try:
            return self.storage.execute_command(*args)
        except Exception as error:
            raise_if_module_missing(error)
            raise

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """Counts every hit, admitted or not, as limits' fixed window expects: THROTTLE.FIXED with the largest limit."""
        return _count(self._execute(*_incr(self.prefixed_key(key), expiry, amount)))

    def get(self, key: str) -> int:
        return _used(self._execute("THROTTLE.INFO", self.prefixed_key(key)))

    def get_expiry(self, key: str) -> float:
        return _expiry(self._execute("PTTL", self.prefixed_key(key)))

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return _allowed(self._execute(*_sliding(self.prefixed_key(key), limit, expiry, amount, exact=True)))

    def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        return _moving_window(self._execute(*_peek(self.prefixed_key(key), limit, expiry, exact=True)), expiry)

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return _allowed(self._execute(*_sliding(self._sliding_key(key), limit, expiry, amount, exact=False)))

    def get_sliding_window(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        peek = _peek(self._sliding_key(key), UNBOUNDED, expiry, exact=False)
        return _sliding_window(self._execute(*peek), expiry)

    def clear(self, key: str) -> None:
        self.storage.delete(self.prefixed_key(key))

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.storage.delete(self._sliding_key(key))

    def check(self) -> bool:
        """True when the server answers and has the module."""
        try:
            self._execute("THROTTLE.INFO", self.prefixed_key("check"))
            return True
        except Exception:
            return False

    def reset(self) -> Optional[int]:
        """Deletes every key under the prefix (SCAN and UNLINK, on every node of a cluster); returns how many."""
        deleted = 0
        batch: List[Any] = []
        for key in self.storage.scan_iter(match=_pattern(self.key_prefix), count=1000):
            batch.append(key)
            if len(batch) == 500:
                deleted += self.storage.unlink(*batch)
                batch = []
        if batch:
            deleted += self.storage.unlink(*batch)
        return deleted


class ThrottleClusterStorage(ThrottleStorage):
    """``throttle+cluster://host:port[,host:port...]`` on redis.cluster.RedisCluster."""

    STORAGE_SCHEME = ["throttle+cluster"]

    def _client(self, uri: str, connection_pool: Optional[redis.ConnectionPool], **options: Any) -> Any:
        return redis.cluster.RedisCluster(**_cluster_options(uri, redis.cluster.ClusterNode, options))


# ------------------------------------------------------------ async

class AsyncThrottleStorage(
    _Keys,
    aio_base.Storage, aio_base.MovingWindowSupport, aio_base.SlidingWindowCounterSupport, base.TimestampedSlidingWindow
):
    """ThrottleStorage for limits' asyncio strategies: ``async+throttle://host:port`` (``async+throttles://``,
    ``async+throttle+unix://``) on redis.asyncio."""

    STORAGE_SCHEME = ["async+throttle", "async+throttles", "async+throttle+unix"]

    def __init__(
        self,
        uri: str,
        key_prefix: str = PREFIX,
        wrap_exceptions: bool = False,
        connection_pool: Optional[redis.asyncio.ConnectionPool] = None,
        implementation: str = "redispy",
        **options: Any,
    ) -> None:
        if implementation != "redispy":  # limits' async Redis storages take this option; coredis is their default
            raise ConfigurationError(
                f"implementation={implementation!r}: the async throttle storages run on redis-py's asyncio client; "
                "leave the option out or pass implementation='redispy'"
            )
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        self.key_prefix = key_prefix
        self.storage = self._client(uri, connection_pool, **options)

    def _client(self, uri: str, connection_pool: Any, **options: Any) -> Any:
        if connection_pool is not None:
            return redis.asyncio.Redis(connection_pool=connection_pool, **options)
        return redis.asyncio.Redis.from_url(_redis_url(uri), **options)

    async def _execute(self, *args: Any) -> Any:
        try:
            return await self.storage.execute_command(*args)
        except Exception as error:
            raise_if_module_missing(error)
            raise

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        return _count(await self._execute(*_incr(self.prefixed_key(key), expiry, amount)))

    async def get(self, key: str) -> int:
        return _used(await self._execute("THROTTLE.INFO", self.prefixed_key(key)))

    async def get_expiry(self, key: str) -> float:
        return _expiry(await self._execute("PTTL", self.prefixed_key(key)))

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return _allowed(await self._execute(*_sliding(self.prefixed_key(key), limit, expiry, amount, exact=True)))

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        return _moving_window(await self._execute(*_peek(self.prefixed_key(key), limit, expiry, exact=True)), expiry)

    async def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return _allowed(await self._execute(*_sliding(self._sliding_key(key), limit, expiry, amount, exact=False)))

    async def get_sliding_window(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        peek = _peek(self._sliding_key(key), UNBOUNDED, expiry, exact=False)
        return _sliding_window(await self._execute(*peek), expiry)

    async def clear(self, key: str) -> None:
        await self.storage.delete(self.prefixed_key(key))

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        await self.storage.delete(self._sliding_key(key))

    async def check(self) -> bool:
        try:
            await self._execute("THROTTLE.INFO", self.prefixed_key("check"))
            return True
        except Exception:
            return False

    async def reset(self) -> Optional[int]:
        deleted = 0
        batch: List[Any] = []
        async for key in self.storage.scan_iter(match=_pattern(self.key_prefix), count=1000):
            batch.append(key)
            if len(batch) == 500:
                deleted += await self.storage.unlink(*batch)
                batch = []
        if batch:
            deleted += await self.storage.unlink(*batch)
        return deleted


class AsyncThrottleClusterStorage(AsyncThrottleStorage):
    """``async+throttle+cluster://host:port[,host:port...]`` on redis.asyncio.cluster.RedisCluster."""

    STORAGE_SCHEME = ["async+throttle+cluster"]

    def _client(self, uri: str, connection_pool: Any, **options: Any) -> Any:
        node = redis.asyncio.cluster.ClusterNode
        return redis.asyncio.cluster.RedisCluster(**_cluster_options(uri, node, options))


# ------------------------------------------------------------ schemes that are no storage, with the one to use

class _TLSClusterScheme(ThrottleClusterStorage):
    """``throttles+cluster://`` is not a scheme (limits has no ``rediss+cluster://`` either): say what is."""

    STORAGE_SCHEME = ["throttles+cluster", "async+throttles+cluster"]

    def __init__(self, uri: str, *args: Any, **options: Any) -> None:
        cluster = "async+throttle+cluster" if uri.startswith("async+") else "throttle+cluster"
        raise ConfigurationError(
            f"{uri!r}: a TLS cluster is {cluster}://host:port[,host:port...] with the storage options ssl=True "
            "(and ssl_ca_certs, ssl_certfile, ssl_keyfile as needed), as limits' redis+cluster://; "
            "throttles:// is for one server"
        )
