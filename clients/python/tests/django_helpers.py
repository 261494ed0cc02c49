"""What the Django tests share: Django set up on the test project (tests/django_project), and fixtures that
point the package at the session's server. Import this module before anything from Django."""

from __future__ import annotations

import os

import django
import pytest

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_project.settings")
django.setup()


def data_commands(client):
    """The server's command counts since the last CONFIG RESETSTAT, by lower-case name, without the
    connections' own (HELLO, CLIENT SETINFO, ...) and the test's (CONFIG, INFO, KEYS, TYPE, ...)."""
    stats = client.info("commandstats")
    own = ("hello", "client|", "config|", "info", "keys", "type", "exists", "select", "ping", "flushall", "pttl")
    return {name: calls for name, calls in ((k[len("cmdstat_"):].lower(), v["calls"]) for k, v in stats.items())
            if not name.startswith(own)}


@pytest.fixture
def url_settings(server, r, settings):
    """REDIS_THROTTLE_CONNECTION: the session's server by URL; the server flushed, its stats reset."""
    settings.REDIS_THROTTLE_CONNECTION = f"redis://{server.url}/0"
    r.config_resetstat()
    yield settings


@pytest.fixture
def redis_cache_settings(server, r, settings):
    """Django's default cache a django-redis cache on the session's server, REDIS_THROTTLE_CONNECTION unset:
    the package takes django-redis's connection."""
    if hasattr(settings, "REDIS_THROTTLE_CONNECTION"):
        del settings.REDIS_THROTTLE_CONNECTION
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://{server.url}/0"}}
    r.config_resetstat()
    yield settings
