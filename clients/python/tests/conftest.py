from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from servers import Certificates, Cluster, RedisServer, TLSUnsupported, server_name  # noqa: E402


def pytest_report_header(config):
    return f"server: {server_name()}"


@pytest.fixture(scope="session")
def server():
    """A redis-server with the module, shared by the tests; `r` flushes it for each test."""
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
def r(server):
    client = server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def cluster():
    cluster = Cluster()
    yield cluster
    cluster.stop()


@pytest.fixture
def rc(cluster):
    cluster.flush()
    client = cluster.client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def bare_server():
    """A redis-server without the module."""
    server = RedisServer(module=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def certificates():
    """A test CA with a server and a client certificate (the openssl tool)."""
    certificates = Certificates()
    yield certificates
    certificates.remove()


@pytest.fixture(scope="session")
def tls_server(certificates):
    """A server with the module listening only on a TLS port (skipped where the binary has no TLS)."""
    try:
        server = RedisServer(tls=certificates)
    except TLSUnsupported as error:
        pytest.skip(str(error))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def tls_cluster(certificates):
    """Three masters on TLS ports only, the cluster bus over TLS too."""
    try:
        cluster = Cluster(tls=certificates)
    except TLSUnsupported as error:
        pytest.skip(str(error))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def unix_server():
    """A server with the module listening only on a unix socket."""
    server = RedisServer(unix=True)
    yield server
    server.stop()
