"""Flask-Limiter with storage_uri="throttle://...", through Flask's test
client, side by side with limits' own Redis storage ("redis://") on the same
server: the same status codes and X-RateLimit-Limit/Remaining headers, and
reset times where both storages define them alike."""

from __future__ import annotations

import math
import time
from typing import Dict, List

import pytest
from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

import redis_throttle  # noqa: F401  (registers throttle://)
from http_sequence import sequence

STRATEGIES = ["fixed-window", "moving-window", "sliding-window-counter"]


def make_app(storage_uri, strategy):
    app = Flask(__name__)
    limiter = Limiter(get_remote_address, app=app, storage_uri=storage_uri, strategy=strategy,
                      headers_enabled=True, default_limits=["100/hour"])
    seen = []

    @app.route("/")
    @limiter.limit("3/minute")
    def index():
        seen.append(limiter.current_limit)
        return "ok"

    @app.route("/open")
    def open_():  # the default limit
        return "open"

    return app, limiter, seen


def run(app, n, path="/"):
    return sequence(app.test_client().get, n, path)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_headers_side_by_side(server, r, strategy):
    ours, _, _ = make_app(f"throttle://{server.url}", strategy)
    theirs, _, _ = make_app(f"redis://{server.url}", strategy)
    a, b = run(ours, 5), run(theirs, 5)
    assert [status for status, _, _ in a] == [200, 200, 200, 429, 429]
    assert [status for status, _, _ in b] == [200, 200, 200, 429, 429]
    for (_, mine, _), (_, limits_own, _) in zip(a, b):
        assert mine["X-RateLimit-Limit"] == limits_own["X-RateLimit-Limit"] == "3"
        assert mine["X-RateLimit-Remaining"] == limits_own["X-RateLimit-Remaining"]
    assert [h["X-RateLimit-Remaining"] for _, h, _ in a] == ["2", "1", "0", "0", "0"]
    # Reset times, each bracketed by when its requests were sent and answered, both storages alike
    # (Flask-Limiter adds 1 s). limits' Redis sliding windows start at the first hit, the module's on the
    # Unix epoch: those only for throttle://.
    for run_, own in ((a, True), (b, False)):
        first_sent, first_answered = run_[0][2]
        for _, headers, (sent, answered) in run_:
            reset = int(headers["X-RateLimit-Reset"])
            if strategy == "sliding-window-counter":
                if own:
                    assert reset in {(int(t) // 60 + 1) * 60 + 1 for t in (first_sent, answered)}
            else:  # fixed and moving window: a minute after the first request, the oldest in the window
                assert int(first_sent) + 60 <= reset <= int(first_answered) + 62
            assert reset - answered - 1 <= int(headers["Retry-After"]) <= reset - sent + 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_clear_and_reset(server, r, strategy):
    app, limiter, seen = make_app(f"throttle://{server.url}", strategy)
    assert [s for s, _, _ in run(app, 4)] == [200, 200, 200, 429]
    current = seen[-1]  # what Flask-Limiter's clear command clears: the limit and its key
    limiter.limiter.clear(current.limit, *current.request_args)
    assert [(s, h["X-RateLimit-Remaining"]) for s, h, _ in run(app, 1)] == [(200, "2")]
    stats = limiter.limiter.get_window_stats(current.limit, *current.request_args)
    assert stats.remaining == 2
    assert [s for s, _, _ in run(app, 3)] == [200, 200, 429]
    limiter.reset()
    assert r.keys("THROTTLE:*") == []
    assert [(s, h["X-RateLimit-Remaining"]) for s, h, _ in run(app, 1)] == [(200, "2")]


def test_default_limits(server, r):
    app, _, _ = make_app(f"throttle://{server.url}", "fixed-window")
    statuses = run(app, 3, "/open")
    assert [(s, h["X-RateLimit-Limit"], h["X-RateLimit-Remaining"]) for s, h, _ in statuses] == [
        (200, "100", "99"), (200, "100", "98"), (200, "100", "97")]


def test_window_passes(server, r):
    """Real clock, no guess at how long: a one-second limit refuses until the server expires its key, then
    lets requests through again."""
    app = Flask(__name__)
    limiter = Limiter(get_remote_address, app=app, storage_uri=f"throttle://{server.url}", headers_enabled=True)

    @app.route("/")
    @limiter.limit("1/second")
    def index():
        return "ok"

    client = app.test_client()
    assert client.get("/").status_code == 200
    limited = client.get("/")
    assert limited.status_code == 429 and math.isclose(int(limited.headers["Retry-After"]), 1, abs_tol=1)
    [key] = r.keys("THROTTLE:*")
    assert 0 < r.pttl(key) <= 1000  # so the loop below ends within a second
    while r.exists(key):
        time.sleep(0.01)
    assert client.get("/").status_code == 200


def one_per_second(storage_uri):
    app = Flask(__name__)
    limiter = Limiter(get_remote_address, app=app, storage_uri=storage_uri, strategy="sliding-window-counter")

    @app.route("/")
    @limiter.limit("1/second")
    def index():
        return "ok"

    return app.test_client()


def until(moment):
    """Sleeps until the clock reads `moment` (at least: sleep never wakes early)."""
    while time.time() < moment:
        time.sleep(max(0.0, moment - time.time()))


def test_a_client_keeping_to_one_per_second_is_admitted_every_time(server, r):
    """The sliding window counter under "1/second", one request a second at the same phase: limits counts the
    previous window's weighted share rounded down (a request there 0.9 s ago weighs 0.9, counted 0), so it
    admits every request; so does throttle:// (the module's FLOOR), where the exact estimate would refuse every
    other one (test_penalties.py shows that, at= driven). Side by side with limits' own redis:// storage.

    Real time, as the storages use the server's clock: throttle://'s windows are aligned on the Unix epoch, so
    its requests go 0.1 s into consecutive seconds; redis://'s start at its first request, so each of its
    requests goes at least k seconds after the first one was answered. What the outcome rests on is asserted,
    from when each request was sent and answered, not assumed."""
    ours, theirs = one_per_second(f"throttle://{server.url}"), one_per_second(f"redis://{server.url}")
    statuses: Dict[str, List[int]] = {"throttle": [], "redis": []}
    base = math.ceil(time.time()) + 0.1
    first_redis = (0.0, 0.0)
    for k in range(4):
        until(base + k)
        sent = time.time()
        statuses["throttle"].append(ours.get("/").status_code)
        answered = time.time()
        # decided inside second k, 0.1 s or more after it began
        assert int(sent) == int(answered) == int(base) + k, "a request took most of a second: cannot tell"
        if k:
            until(first_redis[1] + k + 0.01)  # inside redis://'s k-th window, past its PTTL's rounding
        sent = time.time()
        statuses["redis"].append(theirs.get("/").status_code)
        answered = time.time()
        if k == 0:
            first_redis = (sent, answered)
        assert answered < first_redis[0] + k + 1, "a request took most of a second: cannot tell"
    assert statuses == {"throttle": [200] * 4, "redis": [200] * 4}
