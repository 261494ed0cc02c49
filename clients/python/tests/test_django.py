"""redis_throttle.django on plain Django views (@throttle) and its connection setting, through Django's test
client against the session's server with the module."""

from __future__ import annotations

import math

import django_helpers  # noqa: F401  (sets Django up; before anything from Django)
import pytest
import redis
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django_helpers import data_commands, redis_cache_settings, url_settings  # noqa: F401

from redis_throttle import ThrottleModuleMissing
from redis_throttle.django import get_throttle, throttle
from redis_throttle.django.decorators import parse_rate


def statuses(client, path, n, **extra):
    return [client.get(path, **extra).status_code for _ in range(n)]


def test_by_ip(url_settings, r):
    client = Client(REMOTE_ADDR="10.0.0.1")
    responses = [client.get("/ip") for _ in range(4)]
    assert [x.status_code for x in responses] == [200, 200, 200, 429]
    assert [x.content for x in responses[:3]] == [b"ok, 2 left", b"ok, 1 left", b"ok, 0 left"]
    assert 1 <= int(responses[3]["Retry-After"]) <= 60
    assert statuses(Client(REMOTE_ADDR="10.0.0.2"), "/ip", 1) == [200]  # another address, another key
    # one module command per request, nothing else
    assert data_commands(r) == {"throttle.sliding": 5}
    [key] = r.keys("THROTTLE:view:django_project.views.by_ip:*10.0.0.1")
    assert key == b"THROTTLE:view:django_project.views.by_ip:3/m:ip:10.0.0.1"
    assert r.type(key) == b"thr-exact"


@pytest.mark.django_db
def test_by_user_and_user_or_ip(url_settings):
    alice, bob = User.objects.create(username="alice"), User.objects.create(username="bob")
    anonymous = Client(REMOTE_ADDR="10.0.0.3")
    assert statuses(anonymous, "/user", 3) == [200, 200, 200]  # "user": anonymous requests are not limited
    assert statuses(anonymous, "/user-or-ip", 3) == [200, 200, 429]
    for user in (alice, bob):
        client = Client(REMOTE_ADDR="10.0.0.3")  # the same address: the user is the key
        client.force_login(user)
        assert statuses(client, "/user", 3) == [200, 200, 429]
        assert statuses(client, "/user-or-ip", 3) == [200, 200, 429]


def test_by_header_and_callable(url_settings):
    client = Client()
    assert statuses(client, "/header", 3, HTTP_X_API_KEY="k1") == [200, 200, 429]
    assert statuses(client, "/header", 1, HTTP_X_API_KEY="k2") == [200]
    assert statuses(client, "/header", 3) == [200, 200, 200]  # no header: not limited
    assert [client.get("/callable", {"account": "a"}).status_code for _ in range(3)] == [200, 200, 429]
    assert client.get("/callable", {"account": "b"}).status_code == 200
    assert statuses(client, "/callable", 3) == [200, 200, 200]  # the callable returned None


def test_methods_handler_block_and_group(url_settings):
    client = Client()
    assert statuses(client, "/posts-only", 3) == [200, 200, 200]
    assert [client.post("/posts-only").status_code for _ in range(2)] == [200, 429]

    assert client.get("/custom-handler").status_code == 200
    refused = client.get("/custom-handler")
    assert refused.status_code == 418 and refused.json()["remaining"] == 0
    assert 0 < refused.json()["retry_after"] <= 60

    assert [client.get("/not-blocking").content for _ in range(2)] == [b"ok", b"limited"]
    assert [client.get(p).status_code for p in ("/shared-a", "/shared-b", "/shared-a")] == [200, 200, 429]


def test_handler_setting(url_settings):
    url_settings.REDIS_THROTTLE_HANDLER = "django_project.views.teapot"
    client = Client()
    assert statuses(client, "/ip", 4) == [200, 200, 200, 418]


async def test_async_view(url_settings, async_client):
    responses = [await async_client.get("/async") for _ in range(3)]
    assert [x.status_code for x in responses] == [200, 200, 429]
    assert responses[0].content == b"async ok" and "Retry-After" in responses[2]


@pytest.mark.parametrize("algorithm, key_type", [
    ("exact", b"thr-exact"), ("sliding", b"thr-slide"), ("fixed", b"thr-fixed"), ("token", b"thr-token"),
    ("leaky", b"thr-leaky")])
def test_algorithms(url_settings, r, rf, algorithm, key_type):
    @throttle("2/m", algorithm=algorithm, group="g")
    def view(request):
        from django.http import HttpResponse
        return HttpResponse("ok")

    assert [view(rf.get("/")).status_code for _ in range(3)] == [200, 200, 429]
    [key] = r.keys("THROTTLE:view:g:*")
    assert r.type(key) == key_type


def test_rates():
    assert parse_rate("5/m") == (5, 60)
    assert parse_rate("100/day") == (100, 86400)
    assert parse_rate("3/sec") == (3, 1)
    assert parse_rate("10/5m") == (10, 300)
    assert parse_rate("1/h") == (1, 3600)
    for bad in ("5", "5/ms", "5/week", "0/m", "x/m", "5/0m", None):
        with pytest.raises(ValueError, match="rate"):
            parse_rate(bad)
    with pytest.raises(ValueError, match="key must be"):
        throttle("1/m", key="cookie")
    with pytest.raises(ValueError, match="algorithm must be"):
        throttle("1/m", algorithm="gcra")


def test_retry_after_rounds_up(url_settings, rf):
    """Retry-After is the module's retry_after rounded up to whole seconds (never 0 when refused)."""
    @throttle("1/s", group="second")
    def view(request):
        from django.http import HttpResponse
        return HttpResponse("ok")

    assert view(rf.get("/")).status_code == 200
    refused = view(rf.get("/"))
    request = rf.get("/")
    assert refused.status_code == 429 and refused["Retry-After"] == "1"
    view(request)
    assert not request.throttle.allowed and math.ceil(request.throttle.retry_after) == 1


# The connection setting


def hits(client_path="/ip", n=2):
    return statuses(Client(REMOTE_ADDR="10.9.9.9"), client_path, n)


@pytest.mark.parametrize("protocol", [2, 3])
def test_setting_url(server, r, settings, protocol):
    settings.REDIS_THROTTLE_CONNECTION = f"redis://{server.url}/0?protocol={protocol}"
    assert get_throttle().client.connection_pool.connection_kwargs["protocol"] == protocol
    assert hits(n=4) == [200, 200, 200, 429]
    assert r.exists("THROTTLE:view:django_project.views.by_ip:3/m:ip:10.9.9.9")


def test_setting_url_other_db(server, r, settings):
    settings.REDIS_THROTTLE_CONNECTION = f"redis://{server.url}/3"
    assert hits() == [200, 200]
    assert r.keys("*") == [] and server.client(db=3).keys("THROTTLE:*")


def test_setting_client_and_callable(server, r, settings):
    client = server.client(protocol=3)
    settings.REDIS_THROTTLE_CONNECTION = client
    assert get_throttle().client is client
    assert hits() == [200, 200]
    settings.REDIS_THROTTLE_CONNECTION = lambda: client
    assert get_throttle().client is client
    assert hits(n=2) == [200, 429]


def test_setting_cluster_client(cluster, rc, settings):
    settings.REDIS_THROTTLE_CONNECTION = rc
    assert hits(n=4) == [200, 200, 200, 429]
    assert rc.type("THROTTLE:view:django_project.views.by_ip:3/m:ip:10.9.9.9") == b"thr-exact"


def test_setting_django_redis_default(redis_cache_settings, r):
    """Unset, with a django-redis default cache: django-redis's own connection."""
    from django_redis import get_redis_connection

    assert get_throttle().client.connection_pool is get_redis_connection("default").connection_pool
    assert hits(n=4) == [200, 200, 200, 429]
    assert r.type("THROTTLE:view:django_project.views.by_ip:3/m:ip:10.9.9.9") == b"thr-exact"


def test_setting_cache_alias(server, r, settings):
    """'cache:ALIAS': a django-redis cache other than the default, or Django's own Redis cache backend."""
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "throttles": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": f"redis://{server.url}/1"},
        "builtin": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": f"redis://{server.url}/2"},
    }
    settings.REDIS_THROTTLE_CONNECTION = "cache:throttles"
    assert hits() == [200, 200]
    assert server.client(db=1).keys("THROTTLE:*")
    settings.REDIS_THROTTLE_CONNECTION = "cache:builtin"
    assert hits() == [200, 200]
    assert server.client(db=2).keys("THROTTLE:*")
    # Django's RedisCache has no close(): its pools would be dropped with their sockets open
    from django.core.cache import caches
    for pool in caches["builtin"]._cache._pools.values():
        pool.disconnect()
    settings.REDIS_THROTTLE_CONNECTION = "cache:default"
    with pytest.raises(ImproperlyConfigured, match="REDIS_THROTTLE_CONNECTION: the cache 'default' is .*LocMemCache"):
        hits()
    settings.REDIS_THROTTLE_CONNECTION = "cache:nope"
    with pytest.raises(ImproperlyConfigured, match="there is no cache 'nope'"):
        hits()


def test_setting_key_prefix(url_settings, r):
    url_settings.REDIS_THROTTLE_KEY_PREFIX = "app1:"
    assert hits() == [200, 200]
    assert r.keys("*") == [b"app1:view:django_project.views.by_ip:3/m:ip:10.9.9.9"]


@pytest.mark.parametrize("value, message", [
    ("localhost:6379", "expected a URL"),
    ("http://127.0.0.1:1/0", "REDIS_THROTTLE_CONNECTION = 'http://127.0.0.1:1/0': Redis URL must specify"),
    (42, "must be a URL, a redis-py client"),
])
def test_setting_bad(settings, value, message):
    settings.REDIS_THROTTLE_CONNECTION = value
    with pytest.raises((ImproperlyConfigured, redis.RedisError), match=message):
        get_throttle().fixed("k", 1, 1)


def test_setting_unset_without_a_redis_cache(settings):
    if hasattr(settings, "REDIS_THROTTLE_CONNECTION"):
        del settings.REDIS_THROTTLE_CONNECTION
    with pytest.raises(ImproperlyConfigured, match="set REDIS_THROTTLE_CONNECTION"):
        hits()


# A server without the module


def check_message(error):
    text = str(error)
    assert "THROTTLE commands are missing" in text and "loadmodule /path/to/libredis_throttle.so" in text


def test_missing_module_decorator(bare_server, settings):
    settings.REDIS_THROTTLE_CONNECTION = f"redis://{bare_server.url}/0"
    with pytest.raises(ThrottleModuleMissing) as caught:
        Client().get("/ip")
    check_message(caught.value)


def test_missing_module_django_redis(bare_server, settings):
    settings.CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache",
                                   "LOCATION": f"redis://{bare_server.url}/0"}}
    if hasattr(settings, "REDIS_THROTTLE_CONNECTION"):
        del settings.REDIS_THROTTLE_CONNECTION
    with pytest.raises(ThrottleModuleMissing) as caught:
        Client().get("/ip")
    check_message(caught.value)
