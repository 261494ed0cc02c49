"""``@throttle``: rate limiting for plain Django views, one module command per request."""

from __future__ import annotations

import functools
import math
import re
from typing import Any, Callable, Optional, Sequence, Tuple, TypeVar, Union, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings  # type: ignore[import-untyped]
from django.http import HttpResponse  # type: ignore[import-untyped]
from django.utils.module_loading import import_string  # type: ignore[import-untyped]

from .._core import Decision
from ._connection import get_throttle, key_prefix

__all__ = ["ALGORITHMS", "HANDLER_SETTING", "throttle", "parse_rate", "too_many_requests"]

#: The setting naming the default handler for limited requests (a callable or its dotted path).
HANDLER_SETTING = "REDIS_THROTTLE_HANDLER"
#: algorithm name: the module command it runs (the Throttle method and its options)
ALGORITHMS = {
    "exact": ("sliding", {"exact": True}),  # THROTTLE.SLIDING ... EXACT, as DRF's throttles
    "sliding": ("sliding", {}),
    "fixed": ("fixed", {}),
    "token": ("token", {}),
    "leaky": ("leaky", {}),
}
_UNITS = {"s": 1, "sec": 1, "second": 1, "seconds": 1, "m": 60, "min": 60, "minute": 60, "minutes": 60,
          "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400}
_RATE = re.compile(r"^\s*([0-9]+)\s*/\s*([0-9]*)\s*([a-zA-Z]+)\s*$")

KeyFunc = Callable[[Any], Optional[str]]
Handler = Callable[[Any, Decision], Any]
V = TypeVar("V", bound=Callable[..., Any])


def parse_rate(rate: str) -> Tuple[int, int]:
    """``"5/m"``, ``"100/day"``, ``"10/5m"`` (django-ratelimit's multiplier): (requests, period in seconds)."""
    match = _RATE.match(rate) if isinstance(rate, str) else None
    unit = match and _UNITS.get(match.group(3).lower())
    if not match or not unit:
        raise ValueError(f"rate must look like '5/m', '100/day' or '10/5m' (s, m, h, d); got {rate!r}")
    count, multiplier = int(match.group(1)), int(match.group(2) or 1)
    if count < 1 or multiplier < 1:
        raise ValueError(f"rate needs at least 1 request per at least 1 unit; got {rate!r}")
    return count, multiplier * unit


def _user(request: Any) -> Optional[str]:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return None


def _ip(request: Any) -> Optional[str]:
    address = request.META.get("REMOTE_ADDR")
    return f"ip:{address}" if address else None


def key_function(key: Union[str, KeyFunc]) -> KeyFunc:
    """The function for ``key``: ``"ip"``, ``"user"``, ``"user_or_ip"``, ``"header:NAME"``, ``"get:NAME"``,
    ``"post:NAME"``, or a callable taking the request. A key of None leaves the request unlimited."""
    if callable(key):
        return key
    if key == "ip":
        return _ip
    if key == "user":
        return _user
    if key == "user_or_ip":
        return lambda request: _user(request) or _ip(request)
    kind, _, name = str(key).partition(":")
    if name and kind == "header":
        return lambda request: (f"header:{name.lower()}:{request.headers[name]}"
                                if name in request.headers else None)
    if name and kind in ("get", "post"):
        def field(request: Any) -> Optional[str]:
            value = getattr(request, kind.upper()).get(name)
            return f"{kind}:{name}:{value}" if value is not None else None
        return field
    raise ValueError(f"key must be 'ip', 'user', 'user_or_ip', 'header:NAME', 'get:NAME', 'post:NAME' or a "
                     f"callable taking the request; got {key!r}")


def too_many_requests(request: Any, decision: Decision) -> HttpResponse:
    """The default answer to a limited request: 429 with ``Retry-After`` in whole seconds, rounded up."""
    response = HttpResponse("Too Many Requests\n", status=429, content_type="text/plain")
    if not math.isinf(decision.retry_after):
        response["Retry-After"] = str(math.ceil(decision.retry_after))
    return response


def _handler(handler: Union[Handler, str, None]) -> Handler:
    handler = handler if handler is not None else getattr(settings, HANDLER_SETTING, None)
    if handler is None:
        return too_many_requests
    if isinstance(handler, str):
        return import_string(handler)  # type: ignore[no-any-return]
    return handler


def throttle(rate: str, key: Union[str, KeyFunc] = "ip", *, group: Optional[str] = None,
             methods: Optional[Sequence[str]] = None, algorithm: str = "exact", block: bool = True,
             handler: Union[Handler, str, None] = None) -> Callable[[V], V]:
    """Limit a Django view to ``rate`` (``"5/m"``, ``"100/day"``) per ``key``, one module command a request.

    - ``key``: ``"ip"`` (REMOTE_ADDR), ``"user"`` (authenticated users; others pass), ``"user_or_ip"``,
      ``"header:X-Api-Key"``, ``"get:NAME"``, ``"post:NAME"``, or ``callable(request) -> str | None``.
    - ``group``: views that share a group share their limit (default: the view's dotted name).
    - ``methods``: only these HTTP methods count (default: all).
    - ``algorithm``: ``"exact"`` (the exact sliding log, as DRF's throttles), ``"sliding"``, ``"fixed"``,
      ``"token"`` or ``"leaky"``: THROTTLE.SLIDING EXACT, SLIDING, FIXED, TOKEN or LEAKY.
    - a limited request gets ``handler(request, decision)``: the argument, else the REDIS_THROTTLE_HANDLER
      setting (a callable or its dotted path), else a 429 with ``Retry-After``. With ``block=False`` the view
      runs anyway with ``request.limited = True``.
    - the view sees ``request.throttle`` (the last decision: ``remaining``, ``retry_after``, ...) and
      ``request.limited``.
    """
    limit, period = parse_rate(rate)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}; got {algorithm!r}")
    method, options = ALGORITHMS[algorithm]
    key_of = key_function(key)
    only = None if methods is None else {m.upper() for m in ([methods] if isinstance(methods, str) else methods)}

    def decorate(view: V) -> V:
        name = group or f"{view.__module__}.{view.__qualname__}"

        def check(request: Any) -> Optional[Any]:
            """None to run the view, or the response for a limited request."""
            if only is not None and request.method not in only:
                return None
            value = key_of(request)
            if value is None:
                return None
            decision: Decision = getattr(get_throttle(), method)(
                f"{key_prefix()}view:{name}:{rate}:{value}", limit, period, **options)
            request.throttle = decision
            limited = not decision.allowed or getattr(request, "limited", False)
            request.limited = limited
            if decision.allowed or not block:
                return None
            return _handler(handler)(request, decision)

        if iscoroutinefunction(view):
            async def async_wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
                refused = await sync_to_async(check, thread_sensitive=False)(request)
                if refused is not None:
                    return refused
                return await view(request, *args, **kwargs)

            return cast(V, functools.wraps(view)(markcoroutinefunction(async_wrapper)))

        @functools.wraps(view)
        def wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
            refused = check(request)
            if refused is not None:
                return refused
            return view(request, *args, **kwargs)

        return cast(V, wrapper)

    return decorate
