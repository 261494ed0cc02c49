"""AsyncThrottle and the async limits storages (async+throttle://) with
limits' asyncio strategies."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio
from limits import parse
from limits.aio.strategies import STRATEGIES
from limits.errors import ConfigurationError
from limits.storage import storage_from_string

from redis_throttle import AllDecision, AsyncThrottle, Decision, Spec
from redis_throttle.limits_storage import AsyncThrottleClusterStorage, AsyncThrottleStorage

T0 = 1_700_000_000


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
async def throttle(request, server, r):
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, protocol=request.param)
    yield AsyncThrottle(client)
    await client.aclose()


async def test_every_method(throttle):
    assert await throttle.fixed("f", 3, "1m", at=T0) == Decision(True, 3, 2, 0.0, 60.0)
    assert await throttle.sliding("s", 10, 10, cost=10, at=9) == Decision(True, 10, 0, 0.0, 11.0)
    assert await throttle.sliding("e", 1, 10, exact=True, at=T0) == Decision(True, 1, 0, 0.0, 10.0)
    assert await throttle.token("t", 10, 1, burst=20, cost=20, at=0) == Decision(True, 20, 0, 0.0, 2.0)
    assert await throttle.leaky("l", 10, 1, burst=3, at=0) == Decision(True, 3, 2, 0.0, 0.1)
    assert await throttle.all(Spec.fixed("{a}1", 1, 1), Spec.fixed("{a}2", 1, 1), at=T0) == AllDecision(
        True, (Decision(True, 1, 0, 0.0, 1.0), Decision(True, 1, 0, 0.0, 1.0)))
    assert (await throttle.info("t"))["burst"] == 20
    assert await throttle.info("nothing") is None


async def test_block_lets_other_tasks_run(throttle, server):
    """While one task's call waits on the server, another task runs: it sees the call blocked there and
    refunds the unit, which admits the waiting call. Had the wait held up the event loop, no refund would
    come and the call would time out limited after 30 s (the window lasts a minute)."""
    assert await throttle.fixed("b", 1, 60)
    waiting = asyncio.create_task(throttle.fixed("b", 1, 60, block=30))
    other = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    while (await other.info("clients"))["blocked_clients"] == 0:
        assert not waiting.done(), waiting.result()
        await asyncio.sleep(0.005)
    assert (await AsyncThrottle(other).fixed("b", 1, 60, cost=-1)).allowed
    assert await waiting == Decision(True, 1, 0, 0.0, 60.0)
    await other.aclose()


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
async def test_async_strategies(server, r, strategy):
    storage = storage_from_string(f"async+throttle://{server.url}")
    assert isinstance(storage, AsyncThrottleStorage) and await storage.check()
    limiter = STRATEGIES[strategy](storage)
    item = parse("4/minute")
    before = time.time()
    assert [await limiter.hit(item, "u") for _ in range(5)] == [True] * 4 + [False]
    assert not await limiter.test(item, "u")
    stats = await limiter.get_window_stats(item, "u")
    assert stats.remaining == 0 and before < stats.reset_time <= time.time() + 61
    await limiter.clear(item, "u")
    assert (await limiter.get_window_stats(item, "u")).remaining == 4
    assert await limiter.hit(item, "u", cost=4)
    assert await storage.reset() == 1
    await storage.storage.aclose()


async def test_async_cluster_storage(cluster, rc):
    storage = storage_from_string(f"async+throttle+cluster://{cluster.url}")
    assert isinstance(storage, AsyncThrottleClusterStorage)
    for name, strategy in STRATEGIES.items():
        limiter = strategy(storage)
        item = parse("2/minute")
        for user in (f"{name}:{i}" for i in range(5)):
            assert [await limiter.hit(item, user) for _ in range(3)] == [True, True, False]
    assert await storage.reset() == 15
    await storage.storage.aclose()


async def test_implementation_option(server, r):
    """limits' async Redis storages take implementation= (coredis by default): redispy is what these run on."""
    storage = storage_from_string(f"async+throttle://{server.url}", implementation="redispy")
    assert await storage.check()
    await storage.storage.aclose()
    for other in ("coredis", "valkey"):
        with pytest.raises(ConfigurationError, match=f"implementation='{other}': the async throttle storages run on"):
            storage_from_string(f"async+throttle://{server.url}", implementation=other)
