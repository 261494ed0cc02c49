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


async def test_penalties_floor_and_detail(throttle):
    """The same options as Throttle's, over both protocols."""
    assert await throttle.fixed("p", 1, "1m", ban="15m", at=T0)
    assert await throttle.fixed("p", 1, "1m", ban="15m", detail=True, at=T0 + 1) == Decision(
        False, 1, 0, 900.0, 900.0, hits=1, banned=900.0, next_free=900.0)
    assert not await throttle.sliding("p2", 1, 1, cost=0, ban=60, ban_now=True, at=T0)
    assert (await throttle.token("p3", 2, 1, cost=5, force=True, detail=True, at=T0)).hits == 2  # at most a burst
    assert (await throttle.leaky("p4", 2, 1, cost=3, tally=10, detail=True, at=T0)).hits == 2  # refused, counted
    assert [(await throttle.sliding("f", 1, 1, floor=True, at=T0 + i + 0.1)).allowed for i in range(3)] == [True] * 3
    spec = Spec.fixed("{b}:1", 1, 1, ban=30, renew=True)
    await throttle.all(spec, at=T0)
    refused = await throttle.all(spec, detail=True, at=T0)
    assert refused.decisions[0].banned == 30.0
    with pytest.raises(ValueError, match="renew shapes a ban"):
        await throttle.fixed("p", 1, 1, renew=True)


async def test_a_clock_sends_every_call_its_time(server, r):
    now = [T0]
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
    throttle = AsyncThrottle(client, clock=lambda: now[0])
    assert await throttle.fixed("c", 1, "1m")
    now[0] += 30
    assert (await throttle.fixed("c", 1, "1m")).retry_after == 30.0
    await client.aclose()


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
