"""SlowAPI with Limiter(storage_uri="throttle://...") on a FastAPI app,
through FastAPI's test client, side by side with limits' own Redis storage."""

from __future__ import annotations

import time

import pytest
from fastapi import FastAPI, Request, Response
from fastapi.testclient import TestClient
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

import redis_throttle  # noqa: F401  (registers throttle://)
from http_sequence import sequence

STRATEGIES = ["fixed-window", "moving-window", "sliding-window-counter"]


def make_app(storage_uri, strategy):
    limiter = Limiter(key_func=get_remote_address, storage_uri=storage_uri, strategy=strategy, headers_enabled=True)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    @app.get("/items")
    @limiter.limit("3/minute")
    async def items(request: Request, response: Response):
        return {"ok": True}

    @app.get("/sync")
    @limiter.limit("2/minute")
    def sync_items(request: Request, response: Response):
        return {"ok": True}

    return app, limiter


def run(app, n, path="/items"):
    with TestClient(app) as client:
        return sequence(client.get, n, path)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_headers_side_by_side(server, r, strategy):
    ours, _ = make_app(f"throttle://{server.url}", strategy)
    theirs, _ = make_app(f"redis://{server.url}", strategy)
    a, b = run(ours, 5), run(theirs, 5)
    assert [s for s, _, _ in a] == [s for s, _, _ in b] == [200, 200, 200, 429, 429]
    assert [h["X-RateLimit-Remaining"] for _, h, _ in a] == ["2", "1", "0", "0", "0"]
    for (_, mine, _), (_, limits_own, _) in zip(a, b):
        assert mine["X-RateLimit-Limit"] == limits_own["X-RateLimit-Limit"] == "3"
        assert mine["X-RateLimit-Remaining"] == limits_own["X-RateLimit-Remaining"]
    # SlowAPI's reset is 1 + the reset time, as a float; each bracketed by when its requests were sent and
    # answered, both storages alike (sliding windows only for throttle://: limits' start at the first hit)
    for run_, own in ((a, True), (b, False)):
        first_sent, first_answered = run_[0][2]
        for _, headers, (sent, answered) in run_:
            reset = float(headers["X-RateLimit-Reset"])
            if strategy == "sliding-window-counter":
                if own:
                    assert any(reset == pytest.approx((int(t) // 60 + 1) * 60 + 1, abs=0.05)
                               for t in (first_sent, answered))
            else:  # fixed and moving window: a minute after the first request, the oldest in the window
                assert first_sent + 60 <= reset <= first_answered + 62
            assert reset - answered - 1 <= int(headers["Retry-After"]) <= reset - sent + 1


def test_sync_endpoint_and_reset(server, r):
    app, limiter = make_app(f"throttle://{server.url}", "moving-window")
    assert [(s, h["X-RateLimit-Remaining"]) for s, h, _ in run(app, 3, "/sync")] == [
        (200, "1"), (200, "0"), (429, "0")]
    limiter.reset()
    assert r.keys("THROTTLE:*") == []
    assert run(app, 1, "/sync")[0][0] == 200
