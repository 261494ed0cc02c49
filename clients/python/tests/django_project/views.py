"""The test project's views."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from rest_framework import throttling as drf
from rest_framework.response import Response
from rest_framework.views import APIView

from redis_throttle.django import ThrottleAnonRateThrottle, ThrottleScopedRateThrottle, throttle


class Hello(APIView):
    """DEFAULT_THROTTLE_CLASSES: anonymous 3/min by IP, users 5/min by id."""

    def get(self, request):
        return Response({"hello": str(request.user)})


class Upload(APIView):
    """A scoped view: 2/hour per user (or IP) for this scope only."""

    throttle_classes = [ThrottleScopedRateThrottle]
    throttle_scope = "uploads"

    def post(self, request):
        return Response({"uploaded": True})


class NativeFlood(ThrottleAnonRateThrottle):
    scope = "flood"


class CacheFlood(drf.AnonRateThrottle):
    """DRF's own throttle on Django's cache (a Redis cache in the flood test): read the history, write it."""

    scope = "flood"


class FloodView(APIView):
    authentication_classes: list = []
    permission_classes: list = []

    def get(self, request):
        return Response("ok")


class NativeFloodView(FloodView):
    throttle_classes = [NativeFlood]


class CacheFloodView(FloodView):
    throttle_classes = [CacheFlood]


@throttle("3/m", key="ip")
def by_ip(request):
    return HttpResponse(f"ok, {request.throttle.remaining} left")


@throttle("2/m", key="user_or_ip")
def by_user_or_ip(request):
    return HttpResponse("ok")


@throttle("2/m", key="user")
def by_user(request):
    return HttpResponse("ok")


@throttle("2/m", key="header:X-Api-Key")
def by_header(request):
    return HttpResponse("ok")


@throttle("2/m", key=lambda request: request.GET.get("account"))
def by_callable(request):
    return HttpResponse("ok")


@throttle("1/m", methods=["POST"])
def posts_only(request):
    return HttpResponse("ok")


def teapot(request, decision):
    return JsonResponse({"retry_after": decision.retry_after, "remaining": decision.remaining}, status=418)


@throttle("1/m", handler=teapot)
def custom_handler(request):
    return HttpResponse("ok")


@throttle("1/m", block=False)
def not_blocking(request):
    return HttpResponse("limited" if request.limited else "ok")


@throttle("2/m", group="shared")
def shared_a(request):
    return HttpResponse("a")


@throttle("2/m", group="shared")
def shared_b(request):
    return HttpResponse("b")


@throttle("10/m", key="ip")
def flood(request):
    return HttpResponse("ok")


@throttle("2/m", key="ip")
async def async_view(request):
    return HttpResponse("async ok")
