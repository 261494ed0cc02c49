"""throttles:// (TLS, limits' rediss://) and throttle+unix:// (limits'
redis+unix://), sync and async, against a real server listening only on a
TLS port with a test CA, or only on a unix socket; the cluster over TLS with
limits' own convention (throttle+cluster:// and ssl=True); and the errors for
cluster URIs that name a scheme of the wrong kind."""

from __future__ import annotations

import re

import pytest
import redis
import redis.asyncio
from limits import parse
from limits.aio.strategies import STRATEGIES as ASYNC_STRATEGIES
from limits.errors import ConfigurationError
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES

from redis_throttle import Decision, Throttle
from redis_throttle.limits_storage import (
    AsyncThrottleClusterStorage,
    AsyncThrottleStorage,
    ThrottleClusterStorage,
    ThrottleStorage,
)

# Now and then, on a loaded machine, redis-py leaves a TLS socket of a client already closed (its peer gone)
# for the collector to finalize open; its ResourceWarning, an error here, then fails whatever setup the
# collector happens to interrupt (seen in the TLS cluster's). The sockets are redis-py's, not the package's.
pytestmark = pytest.mark.filterwarnings("ignore:unclosed <ssl.SSLSocket:ResourceWarning")

TYPES = {"fixed-window": b"thr-fixed", "moving-window": b"thr-exact", "sliding-window-counter": b"thr-slide"}
T0 = 1_700_000_000


def hits(storage, n=3, limit="2/minute", user="u"):
    """Each strategy (on a key of its own: fixed and moving windows share one): `n` hits of `limit`, then
    the remaining."""
    out = {}
    for name, strategy in sorted(STRATEGIES.items()):
        limiter, item, key = strategy(storage), parse(limit), f"{user}:{name}"
        out[name] = ([limiter.hit(item, key) for _ in range(n)], limiter.get_window_stats(item, key).remaining)
    return out


async def async_hits(storage, n=3, limit="2/minute", user="u"):
    out = {}
    for name, strategy in sorted(ASYNC_STRATEGIES.items()):
        limiter, item, key = strategy(storage), parse(limit), f"{user}:{name}"
        out[name] = ([await limiter.hit(item, key) for _ in range(n)],
                     (await limiter.get_window_stats(item, key)).remaining)
    return out


EXPECTED = {name: ([True, True, False], 0) for name in STRATEGIES}


def key_types(client):
    return sorted(client.type(key) for key in client.keys("THROTTLE:*"))


# ------------------------------------------------------------ TLS

@pytest.fixture
def tls(tls_server):
    client = tls_server.client()
    client.flushall()
    yield client
    client.close()


def test_throttles_scheme(tls_server, certificates, tls):
    storage = storage_from_string(f"throttles://{tls_server.url}/0?{certificates.query()}")
    assert isinstance(storage, ThrottleStorage) and storage.check()
    assert storage.storage.connection_pool.connection_class is redis.SSLConnection
    assert hits(storage) == EXPECTED
    assert key_types(tls) == sorted(TYPES.values())
    assert storage.reset() == 3


def test_throttles_verifies_the_server(tls_server, certificates, tls):
    """Without the test CA the server's certificate is refused: the connection really is TLS, and checked."""
    storage = storage_from_string(f"throttles://{tls_server.url}/0")
    assert storage.check() is False
    with pytest.raises(redis.ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
        STRATEGIES["fixed-window"](storage).hit(parse("1/minute"), "u")
    plain = storage_from_string(f"throttle://{tls_server.url}", socket_timeout=5)
    assert plain.check() is False  # the TLS port does not speak plain RESP
    assert tls.keys("*") == []


def test_throttles_options_as_storage_options(tls_server, certificates, tls):
    """The TLS files can come as storage options instead of the URI's query, as limits' own."""
    options = {k: v for k, v in certificates.client_options().items() if k != "ssl"}
    storage = storage_from_string(f"throttles://{tls_server.url}", **options)
    assert hits(storage) == EXPECTED


async def test_async_throttles_scheme(tls_server, certificates, tls):
    storage = storage_from_string(f"async+throttles://{tls_server.url}/0?{certificates.query()}")
    assert isinstance(storage, AsyncThrottleStorage) and await storage.check()
    assert storage.storage.connection_pool.connection_class is redis.asyncio.SSLConnection
    assert await async_hits(storage) == EXPECTED
    assert key_types(tls) == sorted(TYPES.values())
    assert await storage.reset() == 3
    await storage.storage.aclose()


@pytest.mark.parametrize("protocol", [2, 3])
def test_client_over_tls(tls_server, tls, protocol):
    client = tls_server.client(protocol=protocol)
    assert Throttle(client).fixed("tls", 2, 60, at=T0) == Decision(True, 2, 1, 0.0, 60.0)
    client.close()


def test_cluster_over_tls(tls_cluster, certificates):
    """limits' convention for a TLS cluster: redis+cluster:// with ssl=True; here throttle+cluster://."""
    tls_cluster.flush()
    storage = storage_from_string(f"throttle+cluster://{tls_cluster.url}", **certificates.client_options())
    assert isinstance(storage, ThrottleClusterStorage) and storage.check()
    users = [f"user:{i}" for i in range(6)]  # spread over the three nodes
    for user in users:
        assert hits(storage, user=user) == EXPECTED
    assert storage.reset() == 3 * len(users)


async def test_async_cluster_over_tls(tls_cluster, certificates):
    tls_cluster.flush()
    storage = storage_from_string(f"async+throttle+cluster://{tls_cluster.url}", **certificates.client_options())
    assert isinstance(storage, AsyncThrottleClusterStorage) and await storage.check()
    for user in (f"user:{i}" for i in range(6)):
        assert await async_hits(storage, user=user) == EXPECTED
    assert await storage.reset() == 18
    await storage.storage.aclose()


# ------------------------------------------------------------ unix socket

@pytest.fixture
def unix(unix_server):
    client = unix_server.client()
    client.flushall()
    client.acl_deluser("app")
    yield client
    client.close()


def test_throttle_unix_scheme(unix_server, unix):
    storage = storage_from_string(f"throttle+unix://{unix_server.socket}?db=2")
    assert isinstance(storage, ThrottleStorage) and storage.check()
    assert storage.storage.connection_pool.connection_class is redis.UnixDomainSocketConnection
    assert hits(storage) == EXPECTED
    assert key_types(unix_server.client(db=2)) == sorted(TYPES.values()) and unix.keys("*") == []


def refused(uri):
    with pytest.raises(redis.AuthenticationError):
        STRATEGIES["fixed-window"](storage_from_string(uri)).hit(parse("1/minute"), "u")


def test_throttle_unix_user_and_password(unix_server, unix):
    unix.acl_setuser("app", enabled=True, passwords=["+sekret"], keys=["*"], commands=["+@all"])
    assert hits(storage_from_string(f"throttle+unix://app:sekret@{unix_server.socket}")) == EXPECTED
    refused(f"throttle+unix://app:wrong@{unix_server.socket}")


@pytest.mark.parametrize("form", [":{password}@{path}", "{path}?password={password}"])
def test_throttle_unix_password(unix_server, unix, form):
    unix.config_set("requirepass", "sekret")
    try:
        uri = "throttle+unix://" + form.format(password="sekret", path=unix_server.socket)
        assert hits(storage_from_string(uri)) == EXPECTED
        refused("throttle+unix://" + form.format(password="wrong", path=unix_server.socket))
    finally:
        with unix_server.client(password="sekret") as admin:
            admin.config_set("requirepass", "")


@pytest.mark.parametrize("scheme", ["throttle+unix", "async+throttle+unix"])
def test_throttle_unix_password_without_at_is_refused(unix_server, scheme):
    """limits' docs show redis+unix://:password/path/to/socket; redis-py reads no password there (no @) and
    connects without one. Here that form is an error that shows the one that works."""
    with pytest.raises(ConfigurationError, match=re.escape(f"e.g. {scheme}://:password@/path/to/socket")):
        storage_from_string(f"{scheme}://:sekret{unix_server.socket}")


async def test_async_throttle_unix_scheme(unix_server, unix):
    storage = storage_from_string(f"async+throttle+unix://{unix_server.socket}?db=3")
    assert isinstance(storage, AsyncThrottleStorage) and await storage.check()
    assert storage.storage.connection_pool.connection_class is redis.asyncio.UnixDomainSocketConnection
    assert await async_hits(storage) == EXPECTED
    assert key_types(unix_server.client(db=3)) == sorted(TYPES.values())
    await storage.storage.aclose()


# ------------------------------------------------------------ cluster URIs of the wrong kind

@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_cluster_on_a_socket_path_says_to_use_throttle_unix(sync):
    scheme = "throttle+cluster" if sync else "async+throttle+cluster"
    with pytest.raises(ConfigurationError) as caught:
        storage_from_string(f"{scheme}:///var/run/redis.sock")
    message = str(caught.value)
    assert "not a socket path" in message
    assert ("use throttle+unix:///path/to/socket" if sync else "use async+throttle+unix:///path/to/socket") in message


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_throttles_cluster_says_to_use_throttle_cluster_with_ssl(sync):
    scheme = "throttles+cluster" if sync else "async+throttles+cluster"
    with pytest.raises(ConfigurationError) as caught:
        storage_from_string(f"{scheme}://127.0.0.1:7000,127.0.0.1:7001")
    cluster = "throttle+cluster" if sync else "async+throttle+cluster"
    assert f"a TLS cluster is {cluster}://host:port[,host:port...] with the storage options ssl=True" in str(caught.value)


def test_cluster_query_options_are_refused_not_ignored():
    """limits' redis+cluster:// ignores a query; a dropped ssl_ca_certs would go unnoticed, so it is an error."""
    with pytest.raises(ConfigurationError, match=r"takes no query options \(ssl, ssl_ca_certs\): pass them as storage"):
        storage_from_string("throttle+cluster://127.0.0.1:7000?ssl=true&ssl_ca_certs=ca.crt")


def test_storage_class_with_a_foreign_scheme():
    with pytest.raises(ConfigurationError, match="starts with one of throttle://, throttles://, throttle\\+unix://"):
        ThrottleStorage("redis://127.0.0.1:6379")
