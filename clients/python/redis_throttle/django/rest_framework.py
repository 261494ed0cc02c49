"""Django REST framework throttles on the module: one THROTTLE.SLIDING ... EXACT per request, no cache
read-modify-write. Same rates (DEFAULT_THROTTLE_RATES), scopes, cache keys and wait() as DRF's own."""

from __future__ import annotations

import math
import time
from typing import Any, Optional

from rest_framework.throttling import (  # type: ignore[import-untyped]
    AnonRateThrottle,
    ScopedRateThrottle,
    SimpleRateThrottle,
    UserRateThrottle,
)

from .._core import Decision
from ._connection import get_throttle, key_prefix

__all__ = [
    "ThrottleAnonRateThrottle",
    "ThrottleScopedRateThrottle",
    "ThrottleSimpleRateThrottle",
    "ThrottleUserRateThrottle",
]


class ThrottleSimpleRateThrottle(SimpleRateThrottle):  # type: ignore[misc]
    """DRF's ``SimpleRateThrottle`` with its history in the module's exact sliding log.

    Subclass it as you subclass DRF's: override ``get_cache_key`` and set ``scope`` or ``rate``. Each
    request is one ``THROTTLE.SLIDING <prefix><cache key> <num_requests> <duration> EXACT``: at most
    ``num_requests`` admitted in any ``duration`` seconds, as DRF's list of timestamps decides it, but
    atomically on the server. ``decision`` holds the module's reply (``remaining``, ``reset_after``, ...).

    Time: the Redis server's clock, unless the class overrides ``timer`` (as DRF's tests do); then each
    call sends ``timer()`` as the command's ``AT``.
    """

    decision: Optional[Decision] = None

    def _app_clock(self) -> bool:
        """True when ``timer`` is not DRF's default ``time.time``: its value then drives the module's clock."""
        return "timer" in vars(self) or getattr(type(self), "timer", None) is not time.time

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.now = self.timer()
        if self.num_requests <= 0:  # "0/min": DRF refuses every request and says to wait the duration
            self.decision = Decision(False, 0, 0, float(self.duration), 0.0)
            return bool(self.throttle_failure())
        self.decision = get_throttle().sliding(
            key_prefix() + str(self.key), self.num_requests, self.duration, exact=True,
            at=self.now if self._app_clock() else None,
        )
        if self.decision.allowed:
            return bool(self.throttle_success())
        return bool(self.throttle_failure())

    def throttle_success(self) -> bool:
        """The module has already recorded the request: nothing to write back."""
        return True

    def throttle_failure(self) -> bool:
        return False

    def wait(self) -> Optional[float]:
        """Seconds until the refused request would be admitted: DRF's ``duration - (now - oldest)`` for a full
        history (the module's ``retry_after``), so ``Retry-After`` is the same. None when nothing was refused
        (DRF asks only after a refusal) or the request can never pass."""
        decision = self.decision
        if decision is None or decision.allowed or math.isinf(decision.retry_after):
            return None
        return decision.retry_after


class ThrottleAnonRateThrottle(AnonRateThrottle, ThrottleSimpleRateThrottle):  # type: ignore[misc]
    """DRF's ``AnonRateThrottle`` (scope ``anon``, unauthenticated requests by IP) on the module."""


class ThrottleUserRateThrottle(UserRateThrottle, ThrottleSimpleRateThrottle):  # type: ignore[misc]
    """DRF's ``UserRateThrottle`` (scope ``user``, by user id, else by IP) on the module."""


class ThrottleScopedRateThrottle(ScopedRateThrottle, ThrottleSimpleRateThrottle):  # type: ignore[misc]
    """DRF's ``ScopedRateThrottle`` (the view's ``throttle_scope``, by user id or IP) on the module."""
