"""The Redis connection the Django integration uses, from the REDIS_THROTTLE_CONNECTION setting."""

from __future__ import annotations

import threading
from typing import Any, Optional

from django.conf import settings  # type: ignore[import-untyped]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]
from django.core.signals import setting_changed  # type: ignore[import-untyped]

from ..client import Throttle

#: The setting that names the connection: a redis-py URL, a client, a callable returning one, or "cache:ALIAS".
CONNECTION_SETTING = "REDIS_THROTTLE_CONNECTION"
#: The setting for the prefix of every key the integration writes (default "THROTTLE:").
KEY_PREFIX_SETTING = "REDIS_THROTTLE_KEY_PREFIX"
DEFAULT_KEY_PREFIX = "THROTTLE:"

_lock = threading.Lock()
_throttle: Optional[Throttle] = None
_owned = False  # _throttle's client was made here (from a URL), not handed in


def _from_cache(alias: str) -> Any:
    """The redis-py client behind the Django cache ``alias``: django-redis's, or Django's own Redis backend's."""
    from django.core.cache import caches  # type: ignore[import-untyped]

    try:
        cache = caches[alias]
    except Exception as error:  # InvalidCacheBackendError
        raise ImproperlyConfigured(f"{CONNECTION_SETTING}: there is no cache {alias!r} in CACHES") from error
    try:
        from django_redis import get_redis_connection  # type: ignore[import-untyped]
    except ImportError:
        pass
    else:
        try:
            return get_redis_connection(alias, write=True)
        except NotImplementedError:  # not a django-redis cache
            pass
    from django.core.cache.backends.redis import RedisCache  # type: ignore[import-untyped]

    if isinstance(cache, RedisCache):
        return cache._cache.get_client(None, write=True)
    raise ImproperlyConfigured(
        f"{CONNECTION_SETTING}: the cache {alias!r} is {type(cache).__module__}.{type(cache).__name__}, which has no "
        "Redis connection; use a django-redis cache or django.core.cache.backends.redis.RedisCache, or set "
        f"{CONNECTION_SETTING} to a URL such as 'redis://localhost:6379/0'"
    )


def _default() -> Any:
    """Unset: the default cache's connection, when that cache is a Redis one."""
    caches = getattr(settings, "CACHES", {}) or {}
    backend = str(caches.get("default", {}).get("BACKEND", ""))
    if backend.startswith("django_redis.") or backend == "django.core.cache.backends.redis.RedisCache":
        return _from_cache("default")
    raise ImproperlyConfigured(
        f"set {CONNECTION_SETTING} in your settings to the Redis server with the redis-throttle module: a URL "
        "('redis://localhost:6379/0', 'rediss://...', 'unix:///path/redis.sock'), a redis-py client, or "
        "'cache:ALIAS' for the connection of a django-redis (or Django Redis) cache; unset, the default cache's "
        "connection is used only when that cache is a Redis one"
    )


def resolve(value: Any) -> Any:
    """The redis-py (or valkey-py) client a REDIS_THROTTLE_CONNECTION value names."""
    if value is None:
        return _default()
    if isinstance(value, str):
        if value.startswith("cache:"):
            return _from_cache(value[len("cache:"):] or "default")
        if "://" not in value:
            raise ImproperlyConfigured(
                f"{CONNECTION_SETTING} = {value!r}: expected a URL such as 'redis://localhost:6379/0' or "
                "'cache:ALIAS'"
            )
        import redis

        try:
            # A blocking pool: when more threads want a connection than the pool holds (max_connections, 50
            # unless the URL says ?max_connections=N), they wait for one instead of failing the request.
            return redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(value))
        except ValueError as error:
            raise ImproperlyConfigured(f"{CONNECTION_SETTING} = {value!r}: {error}") from error
    if hasattr(value, "execute_command"):
        return value
    if callable(value):
        return resolve(value())
    raise ImproperlyConfigured(
        f"{CONNECTION_SETTING} must be a URL, a redis-py client, a callable returning one, or 'cache:ALIAS'; "
        f"got {type(value).__name__}"
    )


def get_throttle() -> Throttle:
    """The process's Throttle on the configured connection, made on first use (and again after the setting
    changes, as in tests with override_settings)."""
    global _throttle, _owned
    throttle = _throttle
    if throttle is None:
        with _lock:
            if _throttle is None:
                value = getattr(settings, CONNECTION_SETTING, None)
                _throttle = Throttle(resolve(value))
                _owned = isinstance(value, str) and not value.startswith("cache:")
            throttle = _throttle
    return throttle


def key_prefix() -> str:
    return str(getattr(settings, KEY_PREFIX_SETTING, DEFAULT_KEY_PREFIX))


def _reset(*, setting: str, **kwargs: Any) -> None:
    """The setting changed: the next use resolves it again. A pool this module made from a URL is closed."""
    global _throttle, _owned
    if setting in (CONNECTION_SETTING, "CACHES"):
        with _lock:
            if _throttle is not None and _owned:
                _throttle.client.connection_pool.disconnect()
            _throttle, _owned = None, False


setting_changed.connect(_reset, dispatch_uid="redis_throttle.django.connection")
