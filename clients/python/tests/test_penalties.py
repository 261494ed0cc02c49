"""Penalties and FLOOR on Throttle: bans (plain, renewing, escalating, set now), counted refusals, forced
units, DETAIL's fields, THROTTLE.ALL's specs, and the errors for bad values; over RESP2 and RESP3, bytes and
decoded replies. Time is driven with at= (the module's AT)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
import redis

from redis_throttle import MAX_TALLY, AllDecision, Decision, Spec, Throttle

T0 = 1_700_000_000


@pytest.fixture(params=[(2, False), (3, False), (3, True)], ids=["resp2", "resp3", "resp3-decoded"])
def throttle(request, server, r):
    protocol, decode = request.param
    client = server.client(protocol=protocol, decode_responses=decode)
    yield Throttle(client)
    client.close()


ALGORITHMS = {
    "fixed": lambda t, **kw: t.fixed("k", 2, "1h", **kw),
    "sliding": lambda t, **kw: t.sliding("k", 2, "1h", **kw),
    "sliding-floor": lambda t, **kw: t.sliding("k", 2, "1h", floor=True, **kw),
    "sliding-exact": lambda t, **kw: t.sliding("k", 2, "1h", exact=True, **kw),
    "token": lambda t, **kw: t.token("k", 2, "1h", **kw),
    "leaky": lambda t, **kw: t.leaky("k", 2, "1h", **kw),
}


# ------------------------------------------------------------ FLOOR

def test_floor_admits_a_client_that_keeps_to_the_rate(throttle):
    """1 per second, one call 0.1 s into every second: the previous call still weighs 0.9 when the next one
    comes. Rounded down (limits' count) it weighs 0 and every call passes; the exact estimate refuses every
    other one."""
    at = [T0 + i + 0.1 for i in range(6)]
    assert [throttle.sliding("floor", 1, 1, floor=True, at=t).allowed for t in at] == [True] * 6
    assert [throttle.sliding("exact", 1, 1, at=t).allowed for t in at] == [True, False] * 3


def test_floor_counts_the_previous_share_rounded_down(throttle):
    """The module reference's example: at 12.5 s the previous window weighs 7.5: FLOOR counts 7, leaving 3."""
    assert throttle.sliding("dan", 10, 10, cost=10, floor=True, at=9) == Decision(True, 10, 0, 0.0, 11.0)
    assert throttle.sliding("dan", 10, 10, cost=0, floor=True, at=12.5).remaining == 3
    assert throttle.sliding("dan", 10, 10, cost=0, at=12.5).remaining == 2


def test_floor_in_a_spec(throttle):
    specs = (Spec.sliding("{f}:s", 1, 1, floor=True),)
    assert [throttle.all(*specs, at=T0 + i + 0.1).allowed for i in range(4)] == [True] * 4


def test_floor_and_exact_exclude_each_other(throttle):
    with pytest.raises(ValueError, match="floor .* exact"):
        throttle.sliding("k", 1, 1, exact=True, floor=True)
    with pytest.raises(ValueError, match="floor .* exact"):
        Spec.sliding("k", 1, 1, exact=True, floor=True)


# ------------------------------------------------------------ DETAIL

def test_detail_adds_hits_banned_and_next_free(throttle):
    first = throttle.fixed("d", 3, "1m", cost=2, tally=100, detail=True, at=T0)
    assert first == Decision(True, 3, 1, 0.0, 60.0, hits=2, banned=0.0, next_free=60.0)
    refused = throttle.fixed("d", 3, "1m", cost=2, tally=100, detail=True, at=T0 + 1)
    assert refused == Decision(False, 3, 0, 59.0, 59.0, hits=4, banned=0.0, next_free=59.0)
    plain = throttle.fixed("d", 3, "1m", at=T0 + 1)
    assert (plain.hits, plain.banned, plain.next_free) == (None, None, None)


def test_detail_next_free_on_an_exact_log_is_when_its_oldest_entry_leaves(throttle):
    for t in (0, 10, 20):
        throttle.sliding("e", 5, "1m", exact=True, at=T0 + t)
    peek = throttle.sliding("e", 5, "1m", cost=0, exact=True, detail=True, at=T0 + 30)
    assert (peek.remaining, peek.hits, peek.next_free) == (2, 3, 30.0)


def test_detail_in_all(throttle):
    specs = (Spec.fixed("{u}:s", 2, 1, ban="1m"), Spec.fixed("{u}:h", 100, "1h", tally=500))
    throttle.all(*specs, at=T0)
    throttle.all(*specs, at=T0)
    refused = throttle.all(*specs, detail=True, at=T0)
    assert refused == AllDecision(False, (
        Decision(False, 2, 0, 60.0, 60.0, hits=2, banned=60.0, next_free=60.0),  # the per-second limit bans
        Decision(True, 100, 98, 0.0, 3600.0, hits=2, banned=0.0, next_free=3600.0),  # the hourly one: unchanged
    ))
    later = throttle.all(*specs, detail=True, at=T0 + 2)
    assert not later and later.decisions[0].banned == 58.0 and later.retry_after == 58.0


# ------------------------------------------------------------ bans

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_ban_refuses_every_call_until_it_ends(throttle, algorithm):
    call = ALGORITHMS[algorithm]
    assert call(throttle, cost=2, ban="10m", at=T0).allowed
    assert call(throttle, ban="10m", at=T0 + 1) == Decision(False, 2, 0, 600.0, 600.0)
    assert call(throttle, ban="10m", at=T0 + 61) == Decision(False, 2, 0, 540.0, 540.0)
    assert call(throttle, cost=0, at=T0 + 61) == Decision(False, 2, 0, 540.0, 540.0)  # a peek, without ban=
    assert call(throttle, cost=0, detail=True, at=T0 + 61).banned == 540.0
    assert call(throttle, cost=0, at=T0 + 601) == Decision(True, 2, 2, 0.0, 0.0)  # idle when it ends


@pytest.mark.parametrize("ban", [600, 600.0, timedelta(minutes=10), "10m", "600s", "600000ms"])
def test_ban_forms(throttle, ban):
    throttle.fixed("k", 1, "1h", at=T0)
    assert throttle.fixed("k", 1, "1h", ban=ban, at=T0).retry_after == 600.0


def test_renewing_and_escalating_bans(throttle):
    throttle.fixed("r", 1, "1m", ban=30, renew=True, at=T0)
    assert [throttle.fixed("r", 1, "1m", ban=30, renew=True, at=T0 + s).retry_after for s in (1, 20, 45)] == [
        30.0, 30.0, 30.0]
    assert throttle.fixed("r", 1, "1m", ban=30, renew=True, at=T0 + 76)
    throttle.token("b", 1, "1m", ban=10, backoff=35, at=T0)
    waits = [throttle.token("b", 1, "1m", ban=10, backoff=timedelta(seconds=35), at=T0 + s).retry_after
             for s in (1, 2, 3, 4, 5)]
    assert waits == [10.0, 20.0, 35.0, 35.0, 35.0]
    throttle.leaky("p", 1, "1m", ban=10, at=T0)
    assert [throttle.leaky("p", 1, "1m", ban=10, at=T0 + s).retry_after for s in (1, 2, 3)] == [10.0, 9.0, 8.0]


def test_ban_now_force_and_refunds(throttle, r):
    forced = throttle.fixed("f", 5, "1m", cost=8, force=True, detail=True, at=T0)
    assert (forced.allowed, forced.remaining, forced.hits) == (False, 0, 8)
    assert not throttle.fixed("f", 5, "1m", at=T0 + 1)
    refund = throttle.fixed("f", 5, "1m", cost=-4, detail=True, at=T0 + 1)
    assert (refund.allowed, refund.remaining, refund.hits) == (True, 1, 4)
    banned = throttle.token("n", 5, "1m", cost=0, ban="15m", ban_now=True, detail=True, at=T0)
    assert (banned.allowed, banned.retry_after, banned.banned) == (False, 900.0, 900.0)
    during = throttle.token("n", 5, "1m", cost=-2, detail=True, at=T0 + 1)
    assert (during.allowed, during.banned, during.hits) == (True, 899.0, 0)  # a refund leaves the ban
    assert throttle.sliding("m", 5, "1m", cost=0, ban=60, ban_now=True, at=T0).retry_after == 60.0
    assert r.type("m") == b"thr-slide"  # a manual ban on a missing key creates it, banned


def test_tally_counts_refused_units_up_to_its_cap(throttle):
    assert throttle.fixed("t", 2, "1m", cost=2, at=T0)
    counts = [throttle.fixed("t", 2, "1m", tally=4, detail=True, at=T0 + 1).hits for _ in range(4)]
    assert counts == [3, 4, 4, 4]
    assert throttle.fixed("t", 2, "1m", tally=MAX_TALLY, detail=True, at=T0 + 1).hits == 5


# ------------------------------------------------------------ bad values, named

@pytest.mark.parametrize(
    "options, error, words",
    [
        ({"ban": 0}, ValueError, "ban must be positive"),
        ({"ban": -5}, ValueError, "ban must be positive"),
        ({"ban": 0.0004}, ValueError, "ban must be a whole number of milliseconds"),
        ({"ban": True}, TypeError, "ban must be seconds"),
        ({"ban": [1]}, TypeError, "ban must be seconds"),
        ({"ban": "soon"}, ValueError, "ban must be seconds, a timedelta or a period"),
        ({"ban": "0s"}, ValueError, "ban must be"),
        ({"renew": True}, ValueError, "renew shapes a ban: it needs ban="),
        ({"backoff": 60}, ValueError, "backoff shapes a ban: it needs ban="),
        ({"ban_now": True}, ValueError, "ban_now shapes a ban: it needs ban="),
        ({"ban": 60, "renew": True, "backoff": 120}, ValueError, "renew and backoff exclude each other"),
        ({"ban": "1m", "backoff": "30s"}, ValueError, "backoff .* must be at least ban"),
        ({"ban": 60, "backoff": "never"}, ValueError, "backoff must be"),
        ({"tally": 0}, ValueError, "tally must be from 1"),
        ({"tally": MAX_TALLY + 1}, ValueError, "tally must be from 1"),
        ({"tally": True}, TypeError, "tally must be the most units to count"),
        ({"tally": 2.5}, TypeError, "tally must be the most units to count"),
        ({"force": 1}, TypeError, "force must be True or False"),
        ({"renew": "yes", "ban": 1}, TypeError, "renew must be True or False"),
        ({"ban_now": None, "ban": 1}, TypeError, "ban_now must be True or False"),
        ({"detail": "yes"}, TypeError, "detail must be True or False"),
        ({"floor": 1}, TypeError, "floor must be True or False"),
    ],
)
def test_bad_values_are_refused_before_sending(throttle, r, options, error, words):
    r.config_resetstat()
    with pytest.raises(error, match=words):
        throttle.sliding("k", 1, 1, **options)
    if "floor" not in options:
        with pytest.raises(error, match=words):
            throttle.fixed("k", 1, 1, **options)
    assert "cmdstat_throttle.sliding" not in r.info("commandstats") and r.dbsize() == 0


@pytest.mark.parametrize("make", [Spec.fixed, Spec.sliding, Spec.token, Spec.leaky])
def test_bad_spec_penalties_are_named(make):
    with pytest.raises(ValueError, match="renew shapes a ban"):
        make("k", 1, 1, renew=True)
    with pytest.raises(ValueError, match="tally must be from 1"):
        make("k", 1, 1, tally=0)
    with pytest.raises(TypeError, match="force"):
        make("k", 1, 1, force=True)  # THROTTLE.ALL takes no FORCE or NOW


def test_all_takes_specs_only(throttle):
    with pytest.raises(TypeError, match="all\\(\\) takes Spec"):
        throttle.all(("FIXED", "k", 1, 1))
    with pytest.raises(TypeError, match="detail must be True or False"):
        throttle.all(Spec.fixed("k", 1, 1), detail=1)


def test_the_module_names_what_only_it_checks(throttle):
    """A ban past 3650 days: the module's own error, naming BAN."""
    with pytest.raises(redis.ResponseError, match="invalid BAN"):
        throttle.fixed("k", 1, 1, ban="3651d")
    with pytest.raises(redis.ResponseError, match="invalid BAN"):
        throttle.fixed("k", 1, 1, ban=timedelta(days=3651))


def test_a_clock_sends_every_call_its_time(server, r):
    """Throttle(client, clock=...) sends the clock's time as AT on every call without at=."""
    now = [T0]
    throttle = Throttle(server.client(), clock=lambda: now[0])
    assert throttle.fixed("c", 1, "15m", ban="15m")
    assert throttle.fixed("c", 1, "15m", ban="15m").retry_after == 900.0
    now[0] += 600
    assert throttle.fixed("c", 1, "15m", cost=0).retry_after == 300.0
    assert throttle.fixed("c", 1, "15m", cost=0, at=T0 + 900).allowed  # at= wins over the clock
    now[0] += 300
    assert throttle.all(Spec.fixed("c", 1, "15m")).allowed
    assert math.isinf(throttle.fixed("c", 1, "15m", cost=2).retry_after)
