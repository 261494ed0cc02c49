from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from servers import Cluster, RedisServer  # noqa: E402


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
