"""Django and Django REST framework on the redis-throttle module.

- DRF: ``ThrottleAnonRateThrottle``, ``ThrottleUserRateThrottle``, ``ThrottleScopedRateThrottle`` and the
  base class ``ThrottleSimpleRateThrottle``, in place of DRF's in ``DEFAULT_THROTTLE_CLASSES``.
- Plain views: ``@throttle("5/m", key="ip")``.
- The connection: the ``REDIS_THROTTLE_CONNECTION`` setting (a URL, a redis-py client, or ``"cache:ALIAS"``
  for a django-redis cache's; unset, the default cache's when that is a Redis cache).
"""

from __future__ import annotations

from typing import Any

from ._connection import CONNECTION_SETTING, KEY_PREFIX_SETTING, get_throttle
from .decorators import HANDLER_SETTING, throttle, too_many_requests

_DRF = ("ThrottleAnonRateThrottle", "ThrottleScopedRateThrottle", "ThrottleSimpleRateThrottle",
        "ThrottleUserRateThrottle")

__all__ = ["CONNECTION_SETTING", "HANDLER_SETTING", "KEY_PREFIX_SETTING", "get_throttle", "throttle",
           "too_many_requests", *_DRF]


def __getattr__(name: str) -> Any:
    """The DRF classes, imported on first use: the decorator works without Django REST framework."""
    if name in _DRF:
        from . import rest_framework

        return getattr(rest_framework, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
