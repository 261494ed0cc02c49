"""Concurrency limits on the module's leases: Throttle.acquire/release/renew and the concurrency() context
manager, on one server over RESP2 and RESP3 (bytes and decoded), valkey-py, a connection pool, and threads
blocked on the server.

Exact replies are driven with ``at=`` (the module's AT). Where the server's own clock is the point (a lease
that runs out, renewals that outlive a lease's first end) the test waits for the server to say so (its TIME,
its key gone, a blocked client), never for a fixed time; no test asserts how long anything took.
"""

from __future__ import annotations

import math
import random
import re
import threading
import time
from typing import Any, Callable, List

import pytest
import redis
import valkey

from redis_throttle import ConcurrencyLimitExceeded, Lease, LeaseDecision, LeaseLost, Throttle
from redis_throttle.concurrency import Concurrency

T0 = 1_700_000_000  # Unix seconds that the AT-driven tests start at


@pytest.fixture(params=[(2, False), (3, False), (3, True)], ids=["resp2", "resp3", "resp3-decoded"])
def throttle(request, server, r):
    protocol, decode = request.param
    # socket_timeout=None: the tests' waits on the server (block=30) outlast redis-py's default 5 s
    client = server.client(protocol=protocol, decode_responses=decode, socket_timeout=None)
    yield Throttle(client)
    client.close()


@pytest.fixture
def client(server, r):
    """A client of its own (RESP3, bytes, no read time-out), closed after the test whatever happens."""
    client = server.client(socket_timeout=None)
    yield client
    client.close()


def wait_until(condition: Callable[[], Any], what: str, limit: float = 30) -> None:
    """Until `condition()` holds; `limit` seconds only turn a hang into a failure that says what it waited for."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


@pytest.fixture(autouse=True)
def _count_from_zero(r):
    """INFO commandstats counts from here (FLUSHALL keeps it)."""
    r.config_resetstat()


def calls(r: redis.Redis, command: str) -> int:
    """How many times the server ran `command` since the test began (INFO commandstats), 0 if never."""
    stats = {name.lower(): value for name, value in r.info("commandstats").items()}.get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def tokens(r: redis.Redis, key: str) -> List[str]:
    """The tokens holding a lease on `key`, as the server lists them (THROTTLE.INFO)."""
    info = Throttle(r).info(key)
    return [token for token, _, _ in info["leases"]] if info else []


def server_time_us(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return seconds * 1_000_000 + micros


def blocked(r: redis.Redis) -> int:
    return int(r.info("clients")["blocked_clients"])


# ---------------------------------------------------------------------------
# acquire, release, renew: the commands, exact with AT
# ---------------------------------------------------------------------------


def test_acquire_admits_up_to_the_limit_then_refuses(throttle):
    first = throttle.acquire("jobs", 2, 30, at=T0)
    assert first.allowed and bool(first)
    assert isinstance(first.token, str) and re.fullmatch(r"[0-9a-f]{32}", first.token)
    assert first == LeaseDecision(True, 2, 1, 0.0, 30.0, token=first.token, ends=T0 + 30)
    second = throttle.acquire("jobs", 2, "30s", at=T0 + 10)
    assert second == LeaseDecision(True, 2, 0, 0.0, 30.0, token=second.token, ends=T0 + 40)
    assert second.token != first.token
    refused = throttle.acquire("jobs", 2, 30, at=T0 + 20)
    assert refused == LeaseDecision(False, 2, 0, 10.0, 20.0) and not refused
    assert refused.token is None and refused.ends is None
    # a lease is held strictly before its end: at T0 + 30 the first slot is free again
    assert throttle.acquire("jobs", 2, 30, at=T0 + 30).remaining == 0


def test_release_and_renew_answer_for_their_own_token_only(throttle):
    lease = throttle.acquire("k", 1, 60, at=T0)
    assert throttle.release("k", "not-a-holder", at=T0 + 1) is False
    assert throttle.release("elsewhere", lease.token, at=T0 + 1) is False
    assert throttle.renew("k", "not-a-holder", 60, at=T0 + 1) is False
    assert not throttle.acquire("k", 1, 60, at=T0 + 1)  # none of that freed the slot
    assert throttle.release("k", lease.token, at=T0 + 2) is True
    assert throttle.release("k", lease.token, at=T0 + 2) is False  # twice: nothing more to free
    other = throttle.acquire("k", 1, 60, at=T0 + 3)
    assert other
    # a late release with the first token never frees the new holder's slot (Laravel's funnel could)
    assert throttle.release("k", lease.token, at=T0 + 4) is False
    assert throttle.renew("k", lease.token, 60, at=T0 + 4) is False
    assert throttle.acquire("k", 1, 60, at=T0 + 4) == LeaseDecision(False, 1, 0, 59.0, 59.0)


def test_renew_moves_the_end(throttle):
    lease = throttle.acquire("k", 1, 10, at=T0)
    assert throttle.renew("k", lease.token, 10, at=T0 + 8) is True
    assert throttle.acquire("k", 1, 10, at=T0 + 12) == LeaseDecision(False, 1, 0, 6.0, 6.0)
    assert throttle.renew("k", lease.token, "2s", at=T0 + 12) is True  # a shorter lease shortens it
    assert throttle.acquire("k", 1, 10, at=T0 + 12).retry_after == 2.0
    # an ended lease cannot be renewed: acquire again
    assert throttle.renew("k", lease.token, 10, at=T0 + 14) is False
    assert throttle.acquire("k", 1, 10, at=T0 + 14)


def test_a_clock_drives_the_lease_commands_too(server, r):
    """Throttle(client, clock=...) sends the clock's time as AT on acquire, renew and release too."""
    now = [T0]
    throttle = Throttle(server.client(), clock=lambda: now[0])
    lease = throttle.acquire("c", 1, 10)
    assert lease.allowed and throttle.acquire("c", 1, 10).retry_after == 10.0
    now[0] = T0 + 8
    assert throttle.renew("c", lease.token, 10) is True
    now[0] = T0 + 12
    assert throttle.acquire("c", 1, 10).retry_after == 6.0  # renewed at T0 + 8 by the clock, not the server's
    assert throttle.release("c", lease.token) is True


def test_a_named_lease_renews_instead_of_taking_a_second_slot(throttle):
    first = throttle.acquire("k", 2, 30, id="worker-7", at=T0)
    assert first.token == "worker-7" and first.remaining == 1
    again = throttle.acquire("k", 2, 30, id="worker-7", at=T0 + 5)
    assert again == LeaseDecision(True, 2, 1, 0.0, 30.0, token="worker-7", ends=T0 + 35)
    named = throttle.acquire("k", 2, 30, id=b"worker-8", at=T0 + 6)
    assert named.token == b"worker-8" and named.remaining == 0  # bytes ids come back as given
    assert throttle.release("k", b"worker-8", at=T0 + 7) and throttle.release("k", "worker-7", at=T0 + 7)


def test_info_lists_the_leases(throttle, r):
    lease = throttle.acquire("k", 3, 60)
    info = throttle.info("k")
    assert info["algorithm"] == "lease" and info["limit"] == 3 and info["holders"] == 1
    [(token, ends_at, left)] = info["leases"]
    assert token == lease.token and 0 < left <= 60_000 and isinstance(ends_at, int)
    assert r.type("k") == b"thr-lease"


@pytest.mark.parametrize("lease", [0, -1, 0.0005, "0s", "1 week", "", True, None])
def test_bad_leases_are_refused_before_sending(throttle, r, lease):
    before = calls(r, "throttle.acquire")
    with pytest.raises((ValueError, TypeError), match="lease"):
        throttle.acquire("k", 1, lease)
    with pytest.raises((ValueError, TypeError), match="lease"):
        throttle.concurrency("k", 1, lease)
    assert calls(r, "throttle.acquire") == before


def test_the_module_names_bad_limits_and_ids(throttle):
    with pytest.raises(redis.ResponseError, match="invalid limit"):
        throttle.acquire("k", 0, 30)
    with pytest.raises(redis.ResponseError, match="invalid ID"):
        throttle.acquire("k", 1, 30, id="")
    with pytest.raises(redis.ResponseError, match="invalid token"):
        throttle.release("k", "x" * 65)


@pytest.mark.parametrize("renew, every", [(False, None), (0, None), (True, 20.0), (5, 5.0), ("500ms", 0.5)])
def test_renew_intervals(throttle, renew, every):
    assert Concurrency(throttle, "k", 1, 60, renew=renew).every == every


@pytest.mark.parametrize("renew", [60, 61, "1m", "1 week"])
def test_a_renewal_interval_not_shorter_than_the_lease_is_refused(throttle, renew):
    with pytest.raises(ValueError, match="renew"):
        throttle.concurrency("k", 1, 60, renew=renew)


# ---------------------------------------------------------------------------
# concurrency(): the context manager
# ---------------------------------------------------------------------------


def test_concurrency_holds_a_slot_and_releases_it(throttle, r):
    with throttle.concurrency("api", 2, 60) as lease:
        assert isinstance(lease, Lease) and tokens(r, "api") == [lease.token]
        assert lease.key == "api" and lease.limit == 2 and lease.lease == 60.0
        assert not lease.lost and not lease.released and lease.decision.remaining == 1
        with throttle.concurrency("api", 2, 60) as second:
            with pytest.raises(ConcurrencyLimitExceeded) as refused:
                with throttle.concurrency("api", 2, 60):
                    pytest.fail("the body of a refused enter ran")
            assert refused.value.limit == 2 and refused.value.key == "api"
            assert 0 < refused.value.retry_after <= 60 and not refused.value.decision
            assert "concurrency limit of 2 reached on 'api': every slot is held;" in str(refused.value)
        assert re.fullmatch(r"[0-9a-f]{32}", lease.token) and second.token != lease.token  # named here
        assert second.released
        assert tokens(r, "api") == [lease.token]
    assert lease.released and not lease.lost
    assert r.exists("api") == 0  # the last lease gone, the key with it
    assert (calls(r, "throttle.acquire"), calls(r, "throttle.release")) == (3, 2)


def test_the_refusal_says_when_a_slot_frees(throttle, r):
    """The holder's lease is taken at a far instant (AT); the server then counts the context manager's call
    at that instant too (time never runs backwards for a key), so retry_after is exact."""
    far = time.time() + 1_000_000
    throttle.acquire("api", 1, 45, at=far)
    with pytest.raises(ConcurrencyLimitExceeded) as refused:
        with throttle.concurrency("api", 1, 45):
            pass
    assert refused.value.retry_after == 45.0


def test_concurrency_releases_when_the_body_raises(throttle, r):
    with pytest.raises(RuntimeError, match="boom"):
        with throttle.concurrency("api", 1, 60) as lease:
            raise RuntimeError("boom")
    assert lease.released and not lease.lost and r.exists("api") == 0
    with throttle.concurrency("api", 1, 60):  # the slot is free again
        pass
    assert calls(r, "throttle.release") == 2


def test_a_named_concurrency_releases_its_name(throttle, r):
    with throttle.concurrency("api", 1, 60, id="nightly-report") as lease:
        assert lease.token == "nightly-report" and tokens(r, "api") == ["nightly-report"]
    assert r.exists("api") == 0


def test_a_lease_that_ran_out_is_reported_lost_and_frees_no_other_slot(throttle, r):
    """The body outlives a 50 ms lease: the server ends it (a timer, no polling) and admits a waiter, whose
    slot the late holder's exit must not free. Everything waits for the server, never for a time."""
    with pytest.raises(LeaseLost) as caught:
        with throttle.concurrency("api", 1, "50ms") as lease:
            # blocks on the server until the 50 ms lease ends; the long block only turns a hang into a failure
            other = throttle.acquire("api", 1, 60, block=30)
            assert other.allowed
    assert caught.value.lease is lease and lease.lost and not lease.released and not lease.renewal_lost
    assert "ended before it was released" in str(caught.value)
    assert tokens(r, "api") == [other.token]  # the late exit left the new holder alone


def test_the_body_exception_wins_over_a_lost_lease(throttle, r):
    with pytest.raises(KeyError):
        with throttle.concurrency("api", 1, 60) as lease:
            r.delete("api")  # the lease ends under the holder
            raise KeyError("the body's own error")
    assert lease.lost and not lease.released


def test_block_waits_on_the_server_for_a_slot(throttle, r):
    holder = throttle.acquire("api", 1, 60)
    entered: List[Lease] = []

    def waiter() -> None:
        with throttle.concurrency("api", 1, 60, block=30) as lease:
            entered.append(lease)

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_until(lambda: blocked(r) == 1 or not thread.is_alive(), "the waiter blocked on the server")
    assert entered == [] and thread.is_alive()
    assert throttle.release("api", holder.token)
    thread.join()
    assert len(entered) == 1 and entered[0].released


def test_block_times_out_with_the_refusal(throttle, r):
    throttle.acquire("api", 1, 60)
    with pytest.raises(ConcurrencyLimitExceeded, match="after waiting '100ms'") as refused:
        with throttle.concurrency("api", 1, 60, block="100ms"):
            pass
    assert 0 < refused.value.retry_after <= 60


def test_a_wait_longer_than_the_socket_timeout_is_refused_before_sending(server, r):
    """redis-py 8 reads with a 5 s time-out by default: a longer wait on the server would end in a dropped
    connection and a call sent again, behind everyone who came since. Refused, saying what to change."""
    client = server.client()
    assert client.connection_pool.connection_kwargs["socket_timeout"] == 5  # what a user gets today
    throttle = Throttle(client)
    throttle.acquire("full", 1, 60)
    with pytest.raises(ValueError, match=r"its socket_timeout is 5 s\): give the client socket_timeout=None or "
                                         r"of at least 31 s"):
        throttle.acquire("full", 1, 60, block=30)
    with pytest.raises(ValueError, match=r"give the client socket_timeout=None, e\.g\."):
        throttle.concurrency("full", 1, 60, block=math.inf).__enter__()
    assert calls(r, "throttle.acquire") == 1 and calls(r, "throttle.release") == 0  # only the first
    refused = throttle.acquire("full", 1, 60, block="200ms")  # a wait the client outlasts is sent
    assert not refused and calls(r, "throttle.acquire") == 2
    unbounded = Throttle(server.client(socket_timeout=None))
    assert unbounded.acquire("free", 1, 60, block=math.inf)  # answered at once: a free slot
    client.close()
    unbounded.client.close()


# ---------------------------------------------------------------------------
# renewal in the background
# ---------------------------------------------------------------------------


def renewers() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("redis-throttle renew")]


def test_background_renewal_keeps_the_lease_past_its_first_end(client, r):
    """A 2 s lease renewed every 100 ms (a renewal would have to stall 1.9 s to lose it): the test waits on the
    server's clock until the lease's first end has passed, then finds it still held (and a competitor
    refused). Without the renewals the server would have ended it; the renewals are counted on the server."""
    throttle = Throttle(client)
    with throttle.concurrency("long", 1, "2s", renew="100ms") as lease:
        [(_, first_end, _)] = throttle.info("long")["leases"]
        wait_until(lambda: server_time_us(r) > first_end, "the server's clock past the lease's first end")
        assert tokens(r, "long") == [lease.token]
        assert not throttle.acquire("long", 1, 60)
        [(_, end_now, _)] = throttle.info("long")["leases"]
        assert end_now > first_end and lease.ends > lease.decision.ends
    assert lease.released and not lease.lost and lease.renewals >= 1
    assert calls(r, "throttle.renew") == lease.renewals  # every renewal sent was answered 1
    assert renewers() == []  # the thread ended with the block


def test_a_renewal_that_finds_the_lease_gone_reports_it(client, r):
    throttle = Throttle(client)
    lost = threading.Event()
    seen: List[Lease] = []

    def on_lost(lease: Lease) -> None:
        seen.append(lease)
        lost.set()

    with pytest.raises(LeaseLost, match="a renewal found it no longer held") as caught:
        with throttle.concurrency("job", 1, 60, renew="20ms", on_lost=on_lost) as lease:
            r.delete("job")  # the lease ends under the holder (an operator's DEL, a failover that lost it)
            assert lost.wait(30), "no renewal reported the lease lost"
            assert lease.lost and lease.renewal_lost
    assert seen == [lease] and caught.value.lease is lease
    assert calls(r, "throttle.release") == 0  # nothing was left to release
    assert renewers() == []


def test_no_renewal_runs_after_the_block(client, r):
    throttle = Throttle(client)
    with throttle.concurrency("job", 1, 60, renew="10ms") as lease:
        wait_until(lambda: lease.renewals >= 2, "two renewals")
    assert renewers() == []
    renewed = calls(r, "throttle.renew")
    assert renewed == lease.renewals
    # the next command on the server comes after the thread ended: no renewal can follow the release
    assert r.exists("job") == 0 and calls(r, "throttle.renew") == renewed


# ---------------------------------------------------------------------------
# waiters, threads and the connection pool
# ---------------------------------------------------------------------------


def test_blocked_acquirers_are_admitted_in_arrival_order(client, r):
    """Threads queue on a full key one after the other (each seen blocked on the server before the next
    starts), in a shuffled order of names; each, once admitted, records its name on the server while it holds
    the only slot. The server's list is the admission order, and it is the arrival order."""
    throttle = Throttle(client)  # one client, one pool, for the holder and every waiter
    holder = throttle.acquire("fifo", 1, 60)
    names = [f"w{i}" for i in range(6)]
    random.shuffle(names)
    errors: List[BaseException] = []

    def work(name: str) -> None:
        try:
            with throttle.concurrency("fifo", 1, 60, block=30, id=name):
                client.rpush("fifo:admitted", name)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = []
    for count, name in enumerate(names, 1):
        thread = threading.Thread(target=work, args=(name,))
        thread.start()
        threads.append(thread)
        wait_until(lambda: blocked(r) == count or not thread.is_alive(), f"{name} blocked on the server")
    assert blocked(r) == len(names)
    assert throttle.release("fifo", holder.token)
    for thread in threads:
        thread.join()
    assert errors == []
    assert [name.decode() for name in r.lrange("fifo:admitted", 0, -1)] == names
    assert r.exists("fifo") == 0


def test_a_blocked_acquire_holds_one_connection_of_the_pool_and_no_more(server, r):
    """Two waiters on a pool of three connections: each holds one for its wait, and the client's other
    commands (the holder's release among them) go through the third."""
    pool = redis.BlockingConnectionPool(host="127.0.0.1", port=server.port, max_connections=3, timeout=30,
                                        client_name="pool-test", socket_timeout=None)
    client = redis.Redis(connection_pool=pool)
    throttle = Throttle(client)
    holder = throttle.acquire("p", 1, 60)
    admitted: List[str] = []

    def work(name: str) -> None:
        with throttle.concurrency("p", 1, 60, block=30, id=name):
            admitted.append(name)

    threads = [threading.Thread(target=work, args=(name,)) for name in ("a", "b")]
    for count, thread in enumerate(threads, 1):
        thread.start()
        wait_until(lambda: blocked(r) == count or not thread.is_alive(), "a waiter blocked on the server")
    assert client.ping() and Throttle(client).fixed("other", 5, 60)  # not starved by the two waiters
    connections = [c for c in r.client_list() if c["name"] == "pool-test"]
    assert len(connections) == 3 and sum(c["cmd"].lower() == "throttle.acquire" and "b" in c["flags"]
                                         for c in connections) == 2
    assert throttle.release("p", holder.token)
    for thread in threads:
        thread.join()
    assert admitted == ["a", "b"] and r.exists("p") == 0
    client.close()
    pool.disconnect()


def test_valkey_client(server, r):
    client = valkey.Valkey(host="127.0.0.1", port=server.port)
    throttle = Throttle(client)
    decision = throttle.acquire("vk", 2, 30, at=T0)
    assert decision == LeaseDecision(True, 2, 1, 0.0, 30.0, token=decision.token, ends=T0 + 30)
    assert throttle.renew("vk", decision.token, 30, at=T0 + 1) and throttle.release("vk", decision.token, at=T0 + 2)
    with throttle.concurrency("vk", 1, 60, renew=True) as lease:
        assert tokens(r, "vk") == [lease.token]
    assert lease.released
    client.close()
