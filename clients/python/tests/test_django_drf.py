"""Django REST framework with the package's throttles, through DRF's test client on the test project
(tests/django_project: DEFAULT_THROTTLE_CLASSES naming ThrottleAnonRateThrottle and
ThrottleUserRateThrottle, a scoped view), and side by side with DRF's own classes on the same sequence of
requests and times."""

from __future__ import annotations

import random
import time

import django_helpers  # noqa: F401  (sets Django up; before anything from Django)
import pytest
from django.contrib.auth.models import User
from django.core.cache import caches
from django_helpers import data_commands, redis_cache_settings, url_settings  # noqa: F401
from rest_framework import throttling as drf
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.test import APIClient, APIRequestFactory
from rest_framework.views import APIView

from redis_throttle import ThrottleModuleMissing
from redis_throttle.django import (
    ThrottleAnonRateThrottle,
    ThrottleScopedRateThrottle,
    ThrottleSimpleRateThrottle,
    ThrottleUserRateThrottle,
)


def test_settings_name_the_classes():
    assert api_settings.DEFAULT_THROTTLE_CLASSES == [ThrottleAnonRateThrottle, ThrottleUserRateThrottle]
    # subclasses of DRF's own: code that checks isinstance(throttle, AnonRateThrottle) still holds
    assert issubclass(ThrottleAnonRateThrottle, drf.AnonRateThrottle)
    assert issubclass(ThrottleUserRateThrottle, drf.UserRateThrottle)
    assert issubclass(ThrottleScopedRateThrottle, drf.ScopedRateThrottle)
    assert issubclass(ThrottleSimpleRateThrottle, drf.SimpleRateThrottle)


@pytest.mark.django_db
def test_anonymous_and_users(url_settings, r):
    anonymous = APIClient(REMOTE_ADDR="10.1.0.1")
    sent = time.time()
    responses = [anonymous.get("/api/hello") for _ in range(4)]
    answered = time.time()
    assert [x.status_code for x in responses] == [200, 200, 200, 429]
    # DRF's wait(): until the oldest request leaves the minute; Retry-After rounds it up
    assert 60 - int(answered - sent) - 1 <= int(responses[3]["Retry-After"]) <= 60
    assert "Expected available in" in responses[3].json()["detail"]
    # both default classes see each request (anon 3/min by IP; user 5/min, by IP for anonymous requests), each
    # with one command: no GET, no SET
    assert data_commands(r) == {"throttle.sliding": 8}
    assert sorted(r.keys("*")) == [b"THROTTLE:throttle_anon_10.1.0.1", b"THROTTLE:throttle_user_10.1.0.1"]
    assert {r.type(k) for k in r.keys("*")} == {b"thr-exact"}

    alice = User.objects.create(username="alice")
    client = APIClient(REMOTE_ADDR="10.1.0.1")  # the same address, but signed in: the anon limit is not hers
    client.force_login(alice)
    assert [client.get("/api/hello").status_code for _ in range(6)] == [200] * 5 + [429]
    assert r.exists(f"THROTTLE:throttle_user_{alice.pk}")


@pytest.mark.django_db
def test_scoped_view(url_settings, r):
    bob = User.objects.create(username="bob")
    client = APIClient()
    client.force_login(bob)
    sent = time.time()
    uploads = [client.post("/api/upload") for _ in range(3)]
    answered = time.time()
    assert [x.status_code for x in uploads] == [200, 200, 429]
    assert 3600 - int(answered - sent) - 1 <= int(uploads[2]["Retry-After"]) <= 3600
    assert r.exists(f"THROTTLE:throttle_uploads_{bob.pk}")
    assert client.get("/api/hello").status_code == 200  # the scope counts only its own view
    other = APIClient()
    other.force_login(User.objects.create(username="carol"))
    assert other.post("/api/upload").status_code == 200


@pytest.mark.django_db
def test_django_redis_connection(redis_cache_settings, r):
    """With django-redis as the default cache and REDIS_THROTTLE_CONNECTION unset, the throttles use
    django-redis's connection; cache.clear() clears them as it clears DRF's own history."""
    client = APIClient(REMOTE_ADDR="10.1.0.2")
    assert [client.get("/api/hello").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert r.type("THROTTLE:throttle_anon_10.1.0.2") == b"thr-exact"
    caches["default"].clear()
    assert client.get("/api/hello").status_code == 200


@pytest.mark.parametrize("protocol", [2, 3])
def test_resp2_and_resp3(server, r, settings, protocol):
    settings.REDIS_THROTTLE_CONNECTION = f"redis://{server.url}/0?protocol={protocol}"
    client = APIClient(REMOTE_ADDR="10.1.0.3")
    responses = [client.get("/api/hello") for _ in range(4)]
    assert [x.status_code for x in responses] == [200, 200, 200, 429]
    assert 1 <= int(responses[3]["Retry-After"]) <= 60


def test_missing_module(bare_server, settings):
    settings.REDIS_THROTTLE_CONNECTION = f"redis://{bare_server.url}/0"
    with pytest.raises(ThrottleModuleMissing, match="loadmodule /path/to/libredis_throttle.so"):
        APIClient().get("/api/hello")


# Side by side with DRF's own classes: the same requests at the same times (driven through timer(), which
# DRF's classes read and this package's send as AT) give the same statuses and the same Retry-After.


def view_with(throttle_class):
    class View(APIView):
        authentication_classes: list = []
        throttle_classes = [throttle_class]

        def get(self, request):
            return Response("ok")

    return View.as_view()


def timed(base, rate_, clock):
    class Timed(base):
        rate = rate_

        def timer(self):
            return clock[0]

    return Timed


@pytest.mark.parametrize("rate", ["3/sec", "3/min", "5/min", "2/hour", "1/day"])
@pytest.mark.parametrize("seed", range(3))
def test_same_answers_as_drf(url_settings, settings, rate, seed):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    caches["default"].clear()
    clock = [1_700_000_000.0]
    ours = view_with(timed(ThrottleAnonRateThrottle, rate, clock))
    theirs = view_with(timed(drf.AnonRateThrottle, rate, clock))
    period = {"s": 1, "m": 60, "h": 3600, "d": 86400}[rate.split("/")[1][0]]
    rng = random.Random(seed)
    factory = APIRequestFactory()
    answers = []
    for _ in range(60):
        # steps of period/8: exact in binary floating point, as in microseconds (the module's AT)
        clock[0] += rng.choice([0, 0, 0.25, 0.5, 1, 2]) * period / 8
        request = factory.get("/", REMOTE_ADDR=f"10.2.{seed}.{rng.randrange(2)}")
        a, b = ours(request), theirs(request)
        answers.append((a.status_code, a.get("Retry-After")))
        assert (a.status_code, a.get("Retry-After")) == (b.status_code, b.get("Retry-After")), (clock[0], answers)
    assert {status for status, _ in answers} == {200, 429}  # both outcomes were compared


def test_zero_rate(url_settings, r):
    """"0/min": DRF refuses every request and says to wait the whole duration; so do these, without a command."""
    view = view_with(timed(ThrottleAnonRateThrottle, "0/min", [1_700_000_000.0]))
    response = view(APIRequestFactory().get("/"))
    assert response.status_code == 429 and response["Retry-After"] == "60"
    assert data_commands(r) == {}
