"""A server without the module: the first use says how to load it."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio
from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES

from redis_throttle import AsyncThrottle, Spec, Throttle, ThrottleModuleMissing


def check_message(error):
    text = str(error)
    assert "THROTTLE commands are missing" in text
    assert "loadmodule /path/to/libredis_throttle.so" in text
    assert isinstance(error, redis.ResponseError)  # existing except clauses still catch it


@pytest.mark.parametrize("protocol", [2, 3])
def test_client(bare_server, protocol):
    throttle = Throttle(bare_server.client(protocol=protocol))
    for call in (lambda: throttle.fixed("k", 1, 1), lambda: throttle.sliding("k", 1, 1, exact=True),
                 lambda: throttle.token("k", 1, 1), lambda: throttle.leaky("k", 1, 1),
                 lambda: throttle.all(Spec.fixed("k", 1, 1)), lambda: throttle.info("k")):
        with pytest.raises(ThrottleModuleMissing) as caught:
            call()
        check_message(caught.value)


async def test_async_client(bare_server):
    client = redis.asyncio.Redis(host="127.0.0.1", port=bare_server.port)
    with pytest.raises(ThrottleModuleMissing) as caught:
        await AsyncThrottle(client).token("k", 1, 1)
    check_message(caught.value)
    await client.aclose()


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_limits_storage(bare_server, strategy):
    storage = storage_from_string(f"throttle://{bare_server.url}")
    assert storage.check() is False
    with pytest.raises(ThrottleModuleMissing) as caught:
        STRATEGIES[strategy](storage).hit(parse("1/second"), "k")
    check_message(caught.value)


def test_flask_first_request(bare_server):
    app = Flask(__name__)
    limiter = Limiter(get_remote_address, app=app, storage_uri=f"throttle://{bare_server.url}")

    @app.route("/")
    @limiter.limit("1/second")
    def index():
        return "ok"

    app.testing = True  # let the error reach the test instead of a 500 page
    with pytest.raises(ThrottleModuleMissing) as caught:
        app.test_client().get("/")
    check_message(caught.value)
