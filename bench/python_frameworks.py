#!/usr/bin/env python3
"""Flask-Limiter and SlowAPI with limits' own Redis storage (redis://) against
this repository's Python package (throttle://), side by side in one run.

    python3 bench/python_frameworks.py MODULE.so OUT.md

Prepares the Python package's virtualenv (clients/python/tests/run.sh venv) and
re-runs itself in it. Starts one redis-server with the module on a free
loopback port (the same server serves both storages) and sends the same
requests through each framework's test client, for each limits strategy:
BENCH_PY_USERS users (200) making BENCH_PY_PER_USER requests (10) each on a
"5 per minute" route, so half are admitted and half get a 429, both with
their headers. Per request: round trips to Redis and the server's own time
(INFO commandstats: calls and usec of every command, after CONFIG RESETSTAT),
and the server process's CPU time (INFO cpu); the median of BENCH_PY_ROUNDS
(3) interleaved rounds is kept.
"""

import os
import statistics
import sys
import time

from python_requests import count_round_trips, in_package_venv, measure as measure_requests, test_servers

HERE = os.path.dirname(os.path.abspath(__file__))

# No `from __future__ import annotations` here: FastAPI reads the endpoint's
# annotations (Request, Response) as objects.
in_package_venv("BENCH_PY_IN_VENV")

import redis  # noqa: E402

SENT = count_round_trips()

import redis_throttle  # noqa: E402,F401  (registers throttle://)

RedisServer = test_servers().RedisServer

USERS = int(os.environ.get("BENCH_PY_USERS", 200))
PER_USER = int(os.environ.get("BENCH_PY_PER_USER", 10))
ROUNDS = int(os.environ.get("BENCH_PY_ROUNDS", 3))
STRATEGIES = ["fixed-window", "moving-window", "sliding-window-counter"]
LIMIT = "5/minute"


def flask_client(uri, strategy):
    from flask import Flask, request
    from flask_limiter import Limiter

    app = Flask(__name__)
    limiter = Limiter(lambda: request.headers["X-User"], app=app, storage_uri=uri, strategy=strategy,
                      headers_enabled=True)

    @app.route("/")
    @limiter.limit(LIMIT)
    def index():
        return "ok"

    client = app.test_client()
    return lambda user: client.get("/", headers={"X-User": user}).status_code, limiter.reset


def slowapi_client(uri, strategy):
    from fastapi import FastAPI, Request, Response
    from fastapi.testclient import TestClient
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded

    limiter = Limiter(key_func=lambda request: request.headers["X-User"], storage_uri=uri, strategy=strategy,
                      headers_enabled=True)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    @app.get("/")
    @limiter.limit(LIMIT)
    async def index(request: Request, response: Response):
        return {"ok": True}

    client = TestClient(app)
    return lambda user: client.get("/", headers={"X-User": user}).status_code, limiter.reset


def measure(server, make_client, uri, strategy):
    call, reset = make_client(uri, strategy)
    r = server.client()
    reset()
    r.flushall()
    call("warm-up")
    result = measure_requests(r, SENT, lambda: [call(f"user-{u}") for _ in range(PER_USER) for u in range(USERS)])
    result["commands"] = ", ".join(f"{name} {calls:g}" for name, calls in result["sent"].items())
    return result


def main():
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "python-frameworks.md")
    server = RedisServer()
    try:
        version = server.client().info("server")["redis_version"]
        frameworks = {"Flask-Limiter": flask_client, "SlowAPI": slowapi_client}
        results = {}
        for _ in range(ROUNDS):
            for framework, make_client in frameworks.items():
                for strategy in STRATEGIES:
                    for scheme in ("redis", "throttle"):
                        key = (framework, strategy, scheme)
                        results.setdefault(key, []).append(
                            measure(server, make_client, f"{scheme}://{server.url}", strategy))
    finally:
        server.stop()

    def median(key, field):
        return statistics.median(run[field] for run in results[key])

    def ratio(a, b):
        return f"{a / b:.2f}×" if b else "-"

    import flask_limiter
    import limits
    import slowapi  # noqa: F401
    from importlib.metadata import version as dist_version

    lines = [
        "# Flask-Limiter and SlowAPI: `redis://` against `throttle://`",
        "",
        f"Written by `make bench` (bench/python_frameworks.py) on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
        f" Redis {version}, redis-py {redis.__version__}, limits {limits.__version__},"
        f" Flask-Limiter {flask_limiter.__version__}, SlowAPI {dist_version('slowapi')}.",
        f"{USERS} users x {PER_USER} requests on a `{LIMIT}` route through each framework's test client"
        f" (half admitted, half 429, all with their headers); median of {ROUNDS} interleaved rounds, both"
        " storages on the same server in the same run.",
        "",
        "Per request: round trips to Redis (commands sent, counted in the client); the server's own time for them (INFO commandstats; a script's includes the commands it runs);"
        " the server process's CPU (INFO cpu, user + sys, which adds reading and writing the sockets);"
        " the ratio of `throttle://` to `redis://` on each.",
        "",
        "| framework | strategy | storage | round trips | server µs (commandstats) | × | server CPU µs | × | requests/s | commands per request |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for framework in ("Flask-Limiter", "SlowAPI"):
        for strategy in STRATEGIES:
            base = (framework, strategy, "redis")
            for scheme in ("redis", "throttle"):
                key = (framework, strategy, scheme)
                server_us, cpu_us = median(key, "server_us"), median(key, "cpu_us")
                lines.append(
                    f"| {framework} | {strategy} | `{scheme}://` | {median(key, 'round_trips'):.2f} | {server_us:.2f} |"
                    f" {ratio(server_us, median(base, 'server_us'))} | {cpu_us:.1f} | {ratio(cpu_us, median(base, 'cpu_us'))} |"
                    f" {median(key, 'req_per_s'):.0f} | {results[key][-1]['commands']} |")
    text = "\n".join(lines) + "\n"
    with open(out, "w") as f:
        f.write(text)
    print(text)


main()
