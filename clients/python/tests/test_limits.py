"""Each limits strategy on throttle://: decisions, stats, clear, reset, the
keys' types, and one module command per storage call."""

from __future__ import annotations

import time

import pytest
from limits import RateLimitItemPerMinute, RateLimitItemPerSecond, parse
from limits.storage import storage_from_string
from limits.strategies import (
    STRATEGIES,
    FixedWindowRateLimiter,
    MovingWindowRateLimiter,
    SlidingWindowCounterRateLimiter,
)

import redis_throttle  # noqa: F401
from redis_throttle.limits_storage import ThrottleStorage

TYPES = {"fixed-window": b"thr-fixed", "moving-window": b"thr-exact", "sliding-window-counter": b"thr-slide"}


@pytest.fixture
def storage(server, r):
    return storage_from_string(f"throttle://{server.url}")


def commands(r):
    """Calls per command (lower case) since the last CONFIG RESETSTAT, less the test's own."""
    stats = {name[len("cmdstat_"):].lower(): value["calls"] for name, value in r.info("commandstats").items()}
    return {name: calls for name, calls in stats.items() if name not in ("info", "config|resetstat")}


def test_scheme_is_registered(storage):
    assert isinstance(storage, ThrottleStorage)
    assert storage.check()


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_strategy(storage, r, strategy):
    limiter = STRATEGIES[strategy](storage)
    item = parse("5/minute")
    assert limiter.test(item, "user")
    assert limiter.get_window_stats(item, "user").remaining == 5
    before = time.time()
    assert [limiter.hit(item, "user") for _ in range(6)] == [True] * 5 + [False]
    assert not limiter.test(item, "user")
    stats = limiter.get_window_stats(item, "user")
    assert stats.remaining == 0
    if strategy == "sliding-window-counter":  # the epoch-aligned window's end (a minute may begin meanwhile)
        ends = {(int(t) // 60 + 1) * 60 for t in (before, time.time())}
        assert any(stats.reset_time == pytest.approx(end, abs=1) for end in ends)
    else:  # a minute after the hits
        assert before + 59 <= stats.reset_time <= time.time() + 61
    assert limiter.get_window_stats(item, "other").remaining == 5
    keys = r.keys("THROTTLE:*")
    assert len(keys) == 1 and r.type(keys[0]) == TYPES[strategy]
    limiter.clear(item, "user")
    assert r.keys("THROTTLE:*") == []
    assert limiter.hit(item, "user")


@pytest.mark.parametrize("strategy", ["moving-window", "sliding-window-counter"])
def test_cost(storage, strategy):
    """A refused hit changes nothing (the fixed window counts it: see below)."""
    limiter = STRATEGIES[strategy](storage)
    item = parse("10/minute")
    assert limiter.hit(item, "k", cost=7)
    assert not limiter.hit(item, "k", cost=4)
    assert limiter.test(item, "k", cost=3) and not limiter.test(item, "k", cost=4)
    assert limiter.hit(item, "k", cost=3)
    assert not limiter.hit(item, "k")


def test_fixed_window_counts_refused_hits_like_limits(storage):
    """incr is limits' unbounded counter: refused hits count, as in its Redis storage."""
    item = parse("10/minute")
    assert storage.incr(item.key_for("k"), 60, amount=7) == 7
    assert storage.incr(item.key_for("k"), 60, amount=4) == 11
    assert storage.get(item.key_for("k")) == 11
    limiter = FixedWindowRateLimiter(storage)
    assert not limiter.hit(item, "k") and not limiter.test(item, "k")
    assert limiter.get_window_stats(item, "k").remaining == 0


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_one_module_command_per_call(storage, r, strategy):
    limiter = STRATEGIES[strategy](storage)
    item = parse("3/minute")
    limiter.hit(item, "warm")
    r.config_resetstat()
    limiter.hit(item, "k")
    hit = commands(r)
    r.config_resetstat()
    limiter.get_window_stats(item, "k")
    stats = commands(r)
    assert sum(hit.values()) == 1 and not any(name.startswith(("eval", "evalsha", "fcall")) for name in stats)
    expected = {
        "fixed-window": ({"throttle.fixed": 1}, {"throttle.info": 1, "pttl": 1}),
        "moving-window": ({"throttle.sliding": 1}, {"throttle.sliding": 1}),
        "sliding-window-counter": ({"throttle.sliding": 1}, {"throttle.sliding": 1}),
    }[strategy]
    assert (hit, stats) == expected


def test_window_resets(storage, r):
    """Real clock, no guess at how long: one-second windows refuse until the server expires their key (its
    TTL is the window's end), then admit again."""
    item = RateLimitItemPerSecond(2)
    for limiter in (FixedWindowRateLimiter(storage), MovingWindowRateLimiter(storage)):
        name = type(limiter).__name__
        assert limiter.hit(item, name) and limiter.hit(item, name) and not limiter.hit(item, name)
        key = f"THROTTLE:{item.key_for(name)}"
        assert 0 < r.pttl(key) <= 1000  # so the loop below ends within a second
        while r.exists(key):
            time.sleep(0.01)
        assert limiter.hit(item, name)


def test_moving_window_resets_when_its_oldest_hit_leaves(storage, r):
    """limits' reset time for a moving window is when the oldest hit still in it leaves (a unit is free
    again then), not when the newest does. The hits, and the stats call, are each bracketed by when they were
    sent and answered; the hits' brackets are apart, so the reset can only match the first."""
    limiter = MovingWindowRateLimiter(storage)
    item = RateLimitItemPerMinute(2)
    sent, first = time.time(), limiter.hit(item, "m")
    answered = time.time()
    while time.time() < answered + 0.2:  # the second hit at least 200 ms later
        time.sleep(0.2)
    later = time.time()
    assert first and limiter.hit(item, "m") and not limiter.hit(item, "m")
    asked = time.time()
    stats = limiter.get_window_stats(item, "m")
    told = time.time()
    # reset = the time limits reads after the reply + the server's ms (rounded up) until the first hit leaves
    latest = answered + 60 + 0.001 + (told - asked)
    assert latest < later + 60, "the stats call took longer than the gap between the hits: cannot tell"
    assert stats.remaining == 0 and sent + 60 <= stats.reset_time <= latest
    r.config_resetstat()  # the stats are one peek with DETAIL
    limiter.get_window_stats(item, "m")
    assert commands(r) == {"throttle.sliding": 1}


def test_sliding_window_counter_stats_match_the_module(storage, r):
    """remaining from get_window_stats is exactly what the module admits next."""
    limiter = SlidingWindowCounterRateLimiter(storage)
    item = RateLimitItemPerMinute(10)
    for _ in range(4):
        limiter.hit(item, "s")
    remaining = limiter.get_window_stats(item, "s").remaining
    assert remaining == 6
    assert all(limiter.hit(item, "s") for _ in range(remaining))
    assert not limiter.hit(item, "s")


def test_reset_deletes_only_its_prefix(storage, r):
    r.set("LIMITS:LIMITER/other", 1)
    r.set("unrelated", 1)
    limiter = FixedWindowRateLimiter(storage)
    for i in range(1200):  # more than one SCAN and UNLINK batch
        limiter.hit(RateLimitItemPerMinute(1), str(i))
    assert storage.reset() == 1200
    assert sorted(r.keys("*")) == [b"LIMITS:LIMITER/other", b"unrelated"]


def test_key_prefix_option(server, r):
    storage = storage_from_string(f"throttle://{server.url}", key_prefix="app1")
    FixedWindowRateLimiter(storage).hit(parse("1/second"), "k")
    assert r.keys("*") == [b"app1:LIMITER/k/1/1/second"]


@pytest.mark.parametrize("protocol", [2, 3])
def test_both_protocols_through_the_uri(server, r, protocol):
    storage = storage_from_string(f"throttle://{server.url}/0?protocol={protocol}")
    assert storage.storage.connection_pool.connection_kwargs["protocol"] == protocol
    for strategy in STRATEGIES.values():
        limiter = strategy(storage)
        item = parse("2/minute")
        key = f"{strategy.__name__}{protocol}"
        assert [limiter.hit(item, key) for _ in range(3)] == [True, True, False]
        assert limiter.get_window_stats(item, key).remaining == 0


def test_connection_pool_option(server, r):
    import redis

    pool = redis.ConnectionPool(host="127.0.0.1", port=server.port, protocol=2)
    storage = storage_from_string("throttle://", connection_pool=pool)
    assert storage.storage.connection_pool is pool
    assert FixedWindowRateLimiter(storage).hit(parse("1/second"), "pooled")
    assert r.type("THROTTLE:LIMITER/pooled/1/1/second") == b"thr-fixed"
