#!/usr/bin/env python3
"""Django REST framework's cache throttle (AnonRateThrottle on a django-redis
cache) against redis_throttle.django's ThrottleAnonRateThrottle, side by side
in one run.

    python3 bench/django_drf.py MODULE.so OUT.md

Prepares the Python package's virtualenv (clients/python/tests/run.sh venv) and
re-runs itself in it. Starts one redis-server with the module on a free
loopback port: Django's default cache is a django-redis cache on it, and the
package's throttle takes django-redis's connection (REDIS_THROTTLE_CONNECTION
unset), so both run on the same server and the same client. BENCH_DJ_USERS
clients (200, each its own address) make BENCH_DJ_PER_USER requests (10) each
on a "5/min" DRF view through DRF's test client: half admitted, half 429.
Per request: round trips to Redis (commands sent, counted in the client), the
server's own time for them (INFO commandstats, after CONFIG RESETSTAT), and
the server process's CPU (INFO cpu); the median of BENCH_DJ_ROUNDS (3)
interleaved rounds is kept.
"""

import os
import statistics
import sys
import time

from python_requests import count_round_trips, in_package_venv, measure as measure_requests, test_servers

HERE = os.path.dirname(os.path.abspath(__file__))

in_package_venv("BENCH_DJ_IN_VENV")

import redis  # noqa: E402

# django-redis's get/set and the package's commands are all counted.
SENT = count_round_trips()
RedisServer = test_servers().RedisServer

USERS = int(os.environ.get("BENCH_DJ_USERS", 200))
PER_USER = int(os.environ.get("BENCH_DJ_PER_USER", 10))
ROUNDS = int(os.environ.get("BENCH_DJ_ROUNDS", 3))
RATE = "5/min"

server = RedisServer()

import django  # noqa: E402
from django.conf import settings  # noqa: E402

settings.configure(
    DEBUG=False,
    SECRET_KEY="bench",
    ALLOWED_HOSTS=["testserver"],
    ROOT_URLCONF=__name__,
    INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "rest_framework"],
    DATABASES={},
    CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": f"redis://{server.url}/0"}},
    REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {"anon": RATE}, "DEFAULT_AUTHENTICATION_CLASSES": [],
                    "DEFAULT_PERMISSION_CLASSES": [], "UNAUTHENTICATED_USER": None},
    LOGGING_CONFIG=None,
)
django.setup()

from django.urls import path  # noqa: E402
from rest_framework.response import Response  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402
from rest_framework.throttling import AnonRateThrottle  # noqa: E402
from rest_framework.views import APIView  # noqa: E402

from redis_throttle.django import ThrottleAnonRateThrottle  # noqa: E402

THROTTLES = {
    "DRF `AnonRateThrottle` (django-redis cache)": AnonRateThrottle,
    "`ThrottleAnonRateThrottle`": ThrottleAnonRateThrottle,
}


def view_for(throttle_class):
    class View(APIView):
        throttle_classes = [throttle_class]

        def get(self, request):
            return Response("ok")

    return View.as_view()


urlpatterns = [path(f"t{i}", view_for(cls)) for i, cls in enumerate(THROTTLES.values())]


def measure(index):
    client = APIClient()
    r = server.client()
    r.flushall()
    client.get(f"/t{index}", REMOTE_ADDR="10.255.255.255")  # warm-up: connections, imports
    r.flushall()
    result = measure_requests(r, SENT, lambda: [
        client.get(f"/t{index}", REMOTE_ADDR=f"10.0.{u // 256}.{u % 256}").status_code
        for _ in range(PER_USER) for u in range(USERS)])
    result["commands"] = ", ".join(f"{name.upper()} {calls:g}" for name, calls in result["sent"].items())
    return result


def main():
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "django.md")
    try:
        version = server.client().info("server")["redis_version"]
        results = {}
        for _ in range(ROUNDS):
            for index, name in enumerate(THROTTLES):
                results.setdefault(name, []).append(measure(index))
    finally:
        server.stop()

    def median(name, field):
        return statistics.median(run[field] for run in results[name])

    import django_redis
    import rest_framework

    base = next(iter(THROTTLES))
    lines = [
        "# Django REST framework: its cache throttle against `redis_throttle.django`",
        "",
        f"Written by `make bench` (bench/django_drf.py) on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
        f" Redis {version}, redis-py {redis.__version__}, Django {django.__version__},"
        f" Django REST framework {rest_framework.VERSION}, django-redis {django_redis.__version__}.",
        f"{USERS} clients x {PER_USER} requests on a `{RATE}` DRF view through DRF's test client (each client its"
        f" own address: half admitted, half 429); median of {ROUNDS} interleaved rounds; both on the same server"
        " and the same django-redis connection in the same run.",
        "",
        "Per request: round trips to Redis (commands sent, counted in the client); the server's own time for them"
        " (INFO commandstats); the server process's CPU (INFO cpu, user + sys, which adds reading and writing the"
        " sockets); the ratio to DRF's own throttle on each.",
        "",
        "| throttle | admitted / limited | round trips | server µs (commandstats) | × | server CPU µs | × |"
        " requests/s | commands per request |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name in THROTTLES:
        server_us, cpu_us = median(name, "server_us"), median(name, "cpu_us")
        last = results[name][-1]
        lines.append(
            f"| {name} | {last['admitted']} / {last['limited']} | {median(name, 'round_trips'):.2f} |"
            f" {server_us:.2f} | {server_us / median(base, 'server_us'):.2f}× | {cpu_us:.1f} |"
            f" {cpu_us / median(base, 'cpu_us'):.2f}× | {median(name, 'req_per_s'):.0f} | {last['commands']} |")
    text = "\n".join(lines) + "\n"
    with open(out, "w") as f:
        f.write(text)
    print(text)


main()
