"""redis-throttle: rate limiting on the redis-throttle module's THROTTLE commands.

- ``Throttle(client)`` / ``AsyncThrottle(client)``: the commands on a redis-py client.
- ``throttle.concurrency(key, limit, lease)``: at most ``limit`` holders at once, a context manager on the
  module's leases (THROTTLE.ACQUIRE, RELEASE, RENEW).
- With ``limits`` installed, importing this package registers the storage schemes
  ``throttle://``, ``throttles://`` (TLS), ``throttle+unix://``, ``throttle+cluster://``
  and their ``async+`` forms for limits, Flask-Limiter and SlowAPI.
"""

from ._core import MAX_TALLY, AllDecision, Decision, Spec, ThrottleModuleMissing
from .client import AsyncThrottle, Throttle
from .concurrency import ConcurrencyLimitExceeded, Lease, LeaseDecision, LeaseLost

__all__ = ["MAX_TALLY", "AllDecision", "AsyncThrottle", "Decision", "Spec", "Throttle", "ThrottleModuleMissing"]
__all__ += ["ConcurrencyLimitExceeded", "Lease", "LeaseDecision", "LeaseLost"]
__version__ = "0.1.0"

try:
    import limits as _limits  # noqa: F401
except ImportError:  # the client works without limits
    pass
else:
    from . import limits_storage  # noqa: F401  (defining its classes registers the schemes)
