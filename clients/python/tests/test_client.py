"""Throttle on one server, over RESP2 and RESP3, bytes and decoded replies."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
import redis
import valkey

from redis_throttle import AllDecision, Decision, Spec, Throttle

T0 = 1_700_000_000  # Unix seconds that the AT-driven tests start at


@pytest.fixture(params=[(2, False), (3, False), (3, True)], ids=["resp2", "resp3", "resp3-decoded"])
def throttle(request, server, r):
    protocol, decode = request.param
    client = server.client(protocol=protocol, decode_responses=decode)
    yield Throttle(client)
    client.close()


def test_redis_py_speaks_resp3_by_default(server):
    """What the RESP3 cases cover: today's redis-py default, a map per reply."""
    reply = server.client().execute_command("THROTTLE.FIXED", "default-protocol", 1, 1)
    assert reply == {b"allowed": True, b"limit": 1, b"remaining": 0, b"retry_after": 0, b"reset_after": 1000}


def test_fixed(throttle):
    assert throttle.fixed("login:alice", 3, "1m", at=T0) == Decision(True, 3, 2, 0.0, 60.0)
    assert throttle.fixed("login:alice", 3, "1m", cost=2, at=T0 + 30) == Decision(True, 3, 0, 0.0, 30.0)
    limited = throttle.fixed("login:alice", 3, "1m", at=T0 + 45)
    assert limited == Decision(False, 3, 0, 15.0, 15.0)
    assert not limited and not limited.allowed


def test_sliding(throttle):
    assert throttle.sliding("api:bob", 10, 10, cost=10, at=9) == Decision(True, 10, 0, 0.0, 11.0)
    assert throttle.sliding("api:bob", 10, 10, at=12) == Decision(True, 10, 1, 0.0, 18.0)


def test_sliding_exact(throttle):
    for i in range(3):
        assert throttle.sliding("sms", 3, 10, exact=True, at=T0 + i).remaining == 2 - i
    assert throttle.sliding("sms", 3, 10, exact=True, at=T0 + 3) == Decision(False, 3, 0, 7.0, 9.0)
    assert throttle.info("sms")["algorithm"] == "sliding-exact"


def test_token(throttle):
    assert throttle.token("api:carol", 10, 1, cost=20, burst=20, at=0) == Decision(True, 20, 0, 0.0, 2.0)
    assert throttle.token("api:carol", 10, 1, burst=20, at=0.05) == Decision(False, 20, 0, 0.05, 1.95)
    assert throttle.token("api:carol", 10, 1, burst=20, at=0.1) == Decision(True, 20, 0, 0.0, 2.0)


def test_leaky(throttle):
    replies = [throttle.leaky("sms:gateway", 10, 1, burst=3, at=0) for _ in range(4)]
    assert replies == [
        Decision(True, 3, 2, 0.0, 0.1),
        Decision(True, 3, 1, 0.1, 0.2),
        Decision(True, 3, 0, 0.2, 0.3),
        Decision(False, 3, 0, 0.1, 0.3),
    ]


@pytest.mark.parametrize("period", [2, 2.0, timedelta(seconds=2), "2s", "2000ms", 1.5, timedelta(milliseconds=1500), "1500ms"])
def test_period_forms(throttle, period):
    throttle.token("k", 4, period, at=T0)
    seconds = period.total_seconds() if isinstance(period, timedelta) else period
    if isinstance(period, str):
        seconds = int(period[:-2]) / 1000 if period.endswith("ms") else int(period[:-1])
    assert throttle.info("k")["period_ms"] == round(seconds * 1000)


@pytest.mark.parametrize("period", [0, -1, 0.0005, 1.0004, timedelta(microseconds=1500), True])
def test_bad_periods_are_refused_before_sending(throttle, period):
    with pytest.raises((ValueError, TypeError)):
        throttle.fixed("k", 1, period)


def test_bad_period_string_gets_the_module_error(throttle):
    with pytest.raises(redis.ResponseError, match="invalid period"):
        throttle.fixed("k", 1, "1 week")


def test_cost_above_limit_never_passes(throttle):
    decision = throttle.fixed("k", 3, 10, cost=4)
    assert decision.allowed is False and decision.retry_after == math.inf


def test_peek_and_refund(throttle):
    throttle.fixed("k", 5, 10, cost=3, at=T0)
    assert throttle.fixed("k", 5, 10, cost=0, at=T0 + 1).remaining == 2
    assert throttle.fixed("k", 5, 10, cost=-2, at=T0 + 1).remaining == 4


def test_decision_is_frozen(throttle):
    decision = throttle.fixed("k", 1, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.allowed = False  # type: ignore[misc]


def test_at_takes_aware_datetimes(throttle):
    at = datetime.fromtimestamp(T0, tz=timezone.utc)
    throttle.fixed("k", 3, 60, at=at)
    assert throttle.fixed("k", 3, 60, at=at + timedelta(seconds=59)) == Decision(True, 3, 1, 0.0, 1.0)
    with pytest.raises(ValueError):
        throttle.fixed("k", 3, 60, at=datetime(2026, 1, 1))


def test_all(throttle):
    specs = (Spec.fixed("{u:1}:s", 2, 1), Spec.fixed("{u:1}:h", 3, 3600))
    first = throttle.all(*specs, at=T0)
    assert first == AllDecision(True, (Decision(True, 2, 1, 0.0, 1.0), Decision(True, 3, 2, 0.0, 3600.0)))
    assert throttle.all(*specs, at=T0)
    limited = throttle.all(*specs, at=T0 + 0.5)
    assert not limited and limited.retry_after == 0.5
    assert throttle.all(*specs, at=T0 + 1).allowed
    # the hourly limit is spent now: only the hour's end lets the next call through
    limited = throttle.all(*specs, at=T0 + 2)
    assert limited.retry_after == 3598.0
    assert throttle.all(Spec.token("{u:1}:t", 1, 1, burst=2), Spec.sliding("{u:1}:x", 5, 1, exact=True), cost=2, at=T0)


def test_all_needs_a_spec(throttle):
    with pytest.raises(ValueError):
        throttle.all()


def test_info(throttle):
    assert throttle.info("missing") is None
    throttle.token("t", 10, "1s", burst=20, at=T0)
    assert throttle.info("t") == {
        "algorithm": "token", "limit": 10, "period_ms": 1000, "burst": 20,
        "updated_at": T0 * 1_000_000, "remaining": 20, "reset_after": 0,  # full again on the server's clock
    }


def test_wrongtype_passes_through(throttle, r):
    r.set("plain", 1)
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        throttle.fixed("plain", 1, 1)


def wait_until_blocked(r, worker):
    """Until the server holds a blocked client, or the worker's call has returned (then it did not block)."""
    while worker.is_alive() and r.info("clients")["blocked_clients"] == 0:
        time.sleep(0.005)


def test_block_waits_on_the_server_until_admitted(throttle, r):
    """A limited call with block waits on the server; a refund from another client admits it there and then.
    Nothing in the test depends on time: the window lasts a minute and the block 30 s, so only the refund
    can turn the reply into an admission."""
    assert throttle.fixed("b", 1, 60)
    assert not throttle.fixed("b", 1, 60)  # no block: answered at once, limited
    assert not throttle.fixed("b", 1, 60, block=0)  # block=0 does not wait either (the module's BLOCK 0 would)
    replies = []
    worker = threading.Thread(target=lambda: replies.append(throttle.fixed("b", 1, 60, block=30)))
    worker.start()
    wait_until_blocked(r, worker)
    assert replies == []  # still waiting on the server
    assert Throttle(r).fixed("b", 1, 60, cost=-1).allowed  # the refund, from another connection
    worker.join()
    assert replies == [Decision(True, 1, 0, 0.0, 60.0)]


def test_block_times_out_with_the_limited_reply(throttle):
    """At its time-out the blocked call gets the limited reply as of that moment: on the server's clock the
    window has 200 ms less to run than when the call came in."""
    first = throttle.fixed("w", 1, 60)
    decision = throttle.fixed("w", 1, 60, block="200ms")
    assert not decision.allowed
    assert decision.reset_after <= first.reset_after - 0.19  # Redis times blocked clients out in whole ms


@pytest.mark.parametrize(
    "block, sent",
    [(None, None), (0, None), (0.25, 250), (timedelta(seconds=2), 2000), ("3s", 3000), ("15ms", 15), (math.inf, 0)],
)
def test_block_forms(block, sent):
    from redis_throttle._core import block_ms

    assert block_ms(block) == sent


def test_valkey_client(server, r):
    client = valkey.Valkey(host="127.0.0.1", port=server.port)
    throttle = Throttle(client)
    assert throttle.fixed("vk", 2, 10, at=T0) == Decision(True, 2, 1, 0.0, 10.0)
    assert throttle.info("vk")["used"] == 1
    client.close()
