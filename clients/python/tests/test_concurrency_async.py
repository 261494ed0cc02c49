"""AsyncThrottle's leases: acquire/release/renew and ``async with throttle.concurrency(...)`` on
redis.asyncio and valkey.asyncio, RESP2 and RESP3, the renewal task, cancellation, arrival order; the cluster
(sync and async); a server without the module.

As in test_concurrency.py: exact replies with ``at=``, waits only for what the server says.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Callable, List

import pytest
import redis
import redis.asyncio
import valkey.asyncio

from redis_throttle import (
    AsyncThrottle,
    ConcurrencyLimitExceeded,
    Lease,
    LeaseDecision,
    LeaseLost,
    Throttle,
    ThrottleModuleMissing,
)

T0 = 1_700_000_000


@pytest.fixture(params=[(2, False), (3, False), (3, True)], ids=["resp2", "resp3", "resp3-decoded"])
async def throttle(request, server, r):
    protocol, decode = request.param
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, protocol=protocol, decode_responses=decode,
                                 socket_timeout=None)  # the waits on the server outlast redis-py's default 5 s
    yield AsyncThrottle(client)
    await client.aclose()


@pytest.fixture
async def aclient(server, r):
    """An asyncio client of its own (no read time-out), closed after the test whatever happens."""
    client = redis.asyncio.Redis(host="127.0.0.1", port=server.port, socket_timeout=None)
    yield client
    await client.aclose()


async def wait_until(condition: Callable[[], Any], what: str, limit: float = 30) -> None:
    """Until `condition()` (a coroutine function) holds; `limit` seconds only turn a hang into a failure."""
    deadline = time.monotonic() + limit
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.005)


@pytest.fixture(autouse=True)
def _count_from_zero(r):
    """INFO commandstats counts from here (FLUSHALL keeps it)."""
    r.config_resetstat()


def calls(r: redis.Redis, command: str) -> int:
    """How many times the server ran `command` since the test began (INFO commandstats), 0 if never."""
    stats = {name.lower(): value for name, value in r.info("commandstats").items()}.get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def tokens(r: redis.Redis, key: str) -> List[str]:
    info = Throttle(r).info(key)
    return [token for token, _, _ in info["leases"]] if info else []


def renewers() -> List[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("redis-throttle renew")]


async def test_acquire_release_renew(throttle):
    first = await throttle.acquire("jobs", 2, 30, at=T0)
    assert first == LeaseDecision(True, 2, 1, 0.0, 30.0, token=first.token, ends=T0 + 30)
    assert isinstance(first.token, str) and len(first.token) == 32
    second = await throttle.acquire("jobs", 2, 30, id="w2", at=T0 + 10)
    assert second == LeaseDecision(True, 2, 0, 0.0, 30.0, token="w2", ends=T0 + 40)
    assert await throttle.acquire("jobs", 2, 30, at=T0 + 20) == LeaseDecision(False, 2, 0, 10.0, 20.0)
    assert await throttle.renew("jobs", first.token, 30, at=T0 + 20) is True
    assert await throttle.acquire("jobs", 2, 30, at=T0 + 25) == LeaseDecision(False, 2, 0, 15.0, 25.0)
    assert await throttle.release("jobs", "w2", at=T0 + 26) is True
    assert await throttle.release("jobs", "w2", at=T0 + 26) is False
    assert await throttle.renew("jobs", "w2", 30, at=T0 + 26) is False
    assert (await throttle.acquire("jobs", 2, 30, at=T0 + 27)).remaining == 0


async def test_concurrency_holds_and_releases(throttle, r):
    async with throttle.concurrency("api", 1, 60) as lease:
        assert isinstance(lease, Lease) and tokens(r, "api") == [lease.token]
        with pytest.raises(ConcurrencyLimitExceeded) as refused:
            async with throttle.concurrency("api", 1, 60):
                pytest.fail("the body of a refused enter ran")
        assert 0 < refused.value.retry_after <= 60
    assert lease.released and r.exists("api") == 0


async def test_concurrency_releases_when_the_body_raises(throttle, r):
    with pytest.raises(RuntimeError, match="boom"):
        async with throttle.concurrency("api", 1, 60) as lease:
            raise RuntimeError("boom")
    assert lease.released and r.exists("api") == 0


async def test_a_lease_that_ran_out_is_reported_lost(throttle, r):
    with pytest.raises(LeaseLost):
        async with throttle.concurrency("api", 1, "50ms") as lease:
            other = await throttle.acquire("api", 1, 60, block=30)  # let in when the 50 ms lease ends
            assert other.allowed
    assert lease.lost and tokens(r, "api") == [other.token]


async def test_block_lets_other_tasks_run(throttle, r, server):
    """A task waits on the server for the slot while another task releases it through the same client."""
    holder = await throttle.acquire("api", 1, 60)
    entered: List[Lease] = []

    async def waiter() -> None:
        async with throttle.concurrency("api", 1, 60, block=30) as lease:
            entered.append(lease)

    task = asyncio.create_task(waiter())
    await wait_until(lambda: _blocked_or_done(r, task, 1), "the waiter blocked on the server")
    assert entered == [] and not task.done()
    assert await throttle.release("api", holder.token)
    await task
    assert len(entered) == 1 and entered[0].released and r.exists("api") == 0


async def _blocked_or_done(r: redis.Redis, task: asyncio.Task[Any], count: int) -> bool:
    return task.done() or int(r.info("clients")["blocked_clients"]) == count


async def test_a_cancelled_waiter_leaves_nothing_behind(throttle, r):
    """Cancelling a task blocked on enter closes its connection; the server forgets the waiter, so the
    holder's release frees the key instead of handing the slot to nobody."""
    holder = await throttle.acquire("api", 1, 60)

    async def waiter() -> None:
        async with throttle.concurrency("api", 1, 60, block=30):
            pytest.fail("a cancelled waiter was let in")

    task = asyncio.create_task(waiter())
    await wait_until(lambda: _blocked_or_done(r, task, 1), "the waiter blocked on the server")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: _no_blocked(r), "the server to drop the waiter")
    # the context manager also sent a release for the token it had named, in case it was let in unheard
    assert calls(r, "throttle.release") == 1
    assert await throttle.release("api", holder.token)
    assert r.exists("api") == 0 and tokens(r, "api") == []


async def _no_blocked(r: redis.Redis) -> bool:
    return int(r.info("clients")["blocked_clients"]) == 0


async def test_tasks_are_admitted_in_arrival_order(aclient, r):
    client = aclient
    throttle = AsyncThrottle(client)
    holder = await throttle.acquire("fifo", 1, 60)
    names = [f"t{i}" for i in range(6)]
    random.shuffle(names)

    async def work(name: str) -> None:
        async with throttle.concurrency("fifo", 1, 60, block=30, id=name):
            await client.rpush("fifo:admitted", name)

    tasks = []
    for count, name in enumerate(names, 1):
        tasks.append(asyncio.create_task(work(name)))
        await wait_until(lambda: _blocked_or_done(r, tasks[-1], count), f"{name} blocked on the server")
    assert await throttle.release("fifo", holder.token)
    await asyncio.gather(*tasks)
    assert [name.decode() for name in r.lrange("fifo:admitted", 0, -1)] == names


async def test_a_blocked_acquire_holds_one_connection_of_the_pool(server, r):
    pool = redis.asyncio.BlockingConnectionPool(host="127.0.0.1", port=server.port, max_connections=2, timeout=30,
                                                socket_timeout=None)
    client = redis.asyncio.Redis(connection_pool=pool)
    throttle = AsyncThrottle(client)
    holder = await throttle.acquire("p", 1, 60)
    task = asyncio.create_task(throttle.acquire("p", 1, 60, block=30))
    await wait_until(lambda: _blocked_or_done(r, task, 1), "the waiter blocked on the server")
    assert await client.ping()  # the second connection serves the client meanwhile
    assert await throttle.release("p", holder.token)
    assert (await task).allowed
    await client.aclose()
    await pool.disconnect()


async def test_background_renewal_keeps_the_lease_past_its_first_end(aclient, r):
    client = aclient
    throttle = AsyncThrottle(client)

    async def past(end_us: int) -> bool:
        seconds, micros = await client.time()
        return seconds * 1_000_000 + micros > end_us

    async with throttle.concurrency("long", 1, "2s", renew="100ms") as lease:
        [(_, first_end, _)] = (await throttle.info("long"))["leases"]
        await wait_until(lambda: past(first_end), "the server's clock past the lease's first end")
        assert tokens(r, "long") == [lease.token]
        assert not await throttle.acquire("long", 1, 60)
        assert len(renewers()) == 1
    assert lease.released and not lease.lost and lease.renewals >= 1
    assert calls(r, "throttle.renew") == lease.renewals
    assert renewers() == []


@pytest.mark.parametrize("coroutine", [False, True], ids=["function", "coroutine"])
async def test_a_renewal_that_finds_the_lease_gone_reports_it(aclient, r, coroutine):
    client = aclient
    throttle = AsyncThrottle(client)
    lost = asyncio.Event()

    def on_lost(lease: Lease) -> None:
        lost.set()

    async def on_lost_async(lease: Lease) -> None:
        lost.set()

    with pytest.raises(LeaseLost, match="a renewal found it no longer held"):
        async with throttle.concurrency("job", 1, 60, renew="20ms",
                                        on_lost=on_lost_async if coroutine else on_lost) as lease:
            r.delete("job")
            await asyncio.wait_for(lost.wait(), 30)
            assert lease.lost
    assert calls(r, "throttle.release") == 0 and renewers() == []


async def test_valkey_asyncio(server, r):
    client = valkey.asyncio.Valkey(host="127.0.0.1", port=server.port)
    throttle = AsyncThrottle(client)
    async with throttle.concurrency("vk", 2, 60, renew=True) as lease:
        assert tokens(r, "vk") == [lease.token]
    assert lease.released and r.exists("vk") == 0
    await client.aclose()


# ---------------------------------------------------------------------------
# Redis Cluster
# ---------------------------------------------------------------------------


def test_cluster_routes_every_lease_command(cluster, rc):
    throttle = Throttle(rc)
    keys = [f"jobs:{i}" for i in range(12)]
    assert {rc.get_node_from_key(key).port for key in keys} == {node.port for node in cluster.nodes}
    for key in keys:
        decision = throttle.acquire(key, 1, 60, at=T0)
        assert decision == LeaseDecision(True, 1, 0, 0.0, 60.0, token=decision.token, ends=T0 + 60)
        assert not throttle.acquire(key, 1, 60, at=T0 + 1)
        assert throttle.renew(key, decision.token, 60, at=T0 + 2)
        assert throttle.release(key, decision.token, at=T0 + 3)
    for key in keys:
        with throttle.concurrency(key, 1, 60, renew=True) as lease:
            assert Throttle(rc).info(key)["leases"][0][0] == lease.token
        assert lease.released and rc.exists(key) == 0


def test_cluster_waiter_is_let_in_by_a_release(cluster, rc):
    import threading

    client = cluster.client(socket_timeout=None)  # the wait on the server outlasts redis-py's default 5 s
    throttle = Throttle(client)
    holder = throttle.acquire("{queue}:slots", 1, 60)
    node = cluster.nodes[[n.port for n in cluster.nodes].index(rc.get_node_from_key("{queue}:slots").port)]
    node_client = node.client()
    entered: List[Lease] = []

    def waiter() -> None:
        with throttle.concurrency("{queue}:slots", 1, 60, block=30) as lease:
            entered.append(lease)

    thread = threading.Thread(target=waiter)
    thread.start()
    deadline = time.monotonic() + 30
    while int(node_client.info("clients")["blocked_clients"]) == 0 and thread.is_alive():
        assert time.monotonic() < deadline, "the waiter never blocked"
        time.sleep(0.005)
    assert throttle.release("{queue}:slots", holder.token)
    thread.join()
    assert len(entered) == 1 and entered[0].released
    node_client.close()
    client.close()


async def test_cluster_clients_refuse_a_wait_longer_than_their_socket_timeout(cluster, rc):
    sync = cluster.client(socket_timeout=2)
    with pytest.raises(ValueError, match="its socket_timeout is 2 s"):
        Throttle(sync).acquire("k", 1, 60, block=5)
    assert Throttle(sync).acquire("k", 1, 60, block=0.5)
    sync.close()
    client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port, socket_timeout=2)
    with pytest.raises(ValueError, match="its socket_timeout is 2 s"):
        await AsyncThrottle(client).acquire("k", 1, 60, block=5)
    assert not await AsyncThrottle(client).acquire("k", 1, 60, block=0.5)
    await client.aclose()


async def test_async_cluster(cluster, rc):
    client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    throttle = AsyncThrottle(client)
    for i in range(9):
        async with throttle.concurrency(f"job:{i}", 2, 60, renew=True) as lease:
            assert Throttle(rc).info(f"job:{i}")["leases"][0][0] == lease.token
            second = await throttle.acquire(f"job:{i}", 2, 60)
            assert second.remaining == 0 and await throttle.release(f"job:{i}", second.token)
        assert lease.released
    await client.aclose()


# ---------------------------------------------------------------------------
# Without the module
# ---------------------------------------------------------------------------


def check_message(error: BaseException) -> None:
    assert "THROTTLE commands are missing" in str(error)
    assert "loadmodule /path/to/libredis_throttle.so" in str(error)


@pytest.mark.parametrize("protocol", [2, 3])
def test_missing_module(bare_server, protocol):
    client = bare_server.client(protocol=protocol)
    throttle = Throttle(client)
    for call in (lambda: throttle.acquire("k", 1, 30), lambda: throttle.release("k", "t"),
                 lambda: throttle.renew("k", "t", 30), lambda: throttle.concurrency("k", 1, 30).__enter__()):
        with pytest.raises(ThrottleModuleMissing) as caught:
            call()
        check_message(caught.value)
    client.close()


async def test_missing_module_async(bare_server):
    client = redis.asyncio.Redis(host="127.0.0.1", port=bare_server.port)
    throttle = AsyncThrottle(client)
    with pytest.raises(ThrottleModuleMissing) as caught:
        async with throttle.concurrency("k", 1, 30):
            pass
    check_message(caught.value)
    for call in (throttle.acquire("k", 1, 30), throttle.release("k", "t"), throttle.renew("k", "t", 30)):
        with pytest.raises(ThrottleModuleMissing):
            await call
    await client.aclose()
