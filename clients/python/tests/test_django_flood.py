"""200 requests at once through a real threaded server (Django's ThreadedWSGIServer, one thread per
connection, as runserver and LiveServerTestCase serve) against a "10/min" view: the package's throttle
admits exactly 10; DRF's own cache throttle, on a Redis cache on the same server, reads the history and
writes it back, so concurrent requests read the same history and more get through (DRF issues #5181,
#8127). Both counts are printed; only the package's is exact."""

from __future__ import annotations

import gc
import http.client
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import django_helpers  # noqa: F401  (sets Django up; before anything from Django)
import pytest
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.core.wsgi import get_wsgi_application
from servers import server_name

REQUESTS = 200
LIMIT = 10


class FloodServer(ThreadedWSGIServer):
    request_queue_size = REQUESTS + 56  # every connection of the flood waits in the listen queue


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def wsgi_server():
    httpd = FloodServer(("127.0.0.1", 0), QuietHandler, allow_reuse_address=False)
    httpd.set_app(get_wsgi_application())
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    thread.join()
    # What the server threads' caches left behind (Django's RedisCache, below) goes now, its open sockets
    # included, rather than at some later test's garbage collection.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def flood(port, path):
    """REQUESTS requests released at once (a barrier), each on its own connection; their status codes."""
    barrier = threading.Barrier(REQUESTS)

    def one(_):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        barrier.wait()
        try:
            connection.request("GET", path, headers={"Connection": "close"})
            return connection.getresponse().status
        finally:
            connection.close()

    with ThreadPoolExecutor(REQUESTS) as pool:
        return list(pool.map(one, range(REQUESTS)))


CACHES = {
    "django-redis": "django_redis.cache.RedisCache",
    "Django's RedisCache": "django.core.cache.backends.redis.RedisCache",
}


@pytest.mark.parametrize("cache", [
    "django-redis",
    # Django's own RedisCache keeps a connection pool in each thread's cache object and has no close(): each
    # server thread that ends drops its pool with the sockets open (Python's ResourceWarning, not this
    # package's connections)
    pytest.param("Django's RedisCache", marks=pytest.mark.filterwarnings(
        "ignore::pytest.PytestUnraisableExceptionWarning")),
])
def test_flood(server, r, settings, wsgi_server, capsys, cache):
    # Room in the cache's connection pool for every request at once (redis-py's default is 100). django-redis
    # keeps one pool per URL for the process, made with the options of the first cache on that URL: a
    # database no other test's cache uses gets a pool with these.
    options = {"CONNECTION_POOL_KWARGS": {"max_connections": 2 * REQUESTS}} if cache == "django-redis" \
        else {"max_connections": 2 * REQUESTS}
    settings.CACHES = {"default": {"BACKEND": CACHES[cache], "LOCATION": f"redis://{server.url}/9",
                                   "OPTIONS": options}}
    settings.REDIS_THROTTLE_CONNECTION = f"redis://{server.url}/0"

    native = flood(wsgi_server, "/api/flood/native")
    assert sorted(set(native)) == [200, 429]
    assert native.count(200) == LIMIT
    decorator = flood(wsgi_server, "/flood")
    assert decorator.count(200) == LIMIT and decorator.count(429) == REQUESTS - LIMIT

    theirs = flood(wsgi_server, "/api/flood/cache")
    assert set(theirs) <= {200, 429}
    assert theirs.count(200) >= LIMIT
    assert server.client(db=9).keys("*") == [b":1:throttle_flood_127.0.0.1"]  # DRF's history, in the cache
    with capsys.disabled():
        print(f"\nflood on {server_name()}: {REQUESTS} requests at once on a {LIMIT}/min view, admitted: "
              f"ThrottleAnonRateThrottle {native.count(200)}, @throttle {decorator.count(200)}, "
              f"DRF's AnonRateThrottle on {cache} {theirs.count(200)}")
