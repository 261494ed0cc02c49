"""What the sync and async clients share: arguments in, replies out."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from redis.exceptions import ResponseError

#: seconds (int or float), a timedelta, or the module's own period string ("500ms", "1s", "15m", "24h", "7d")
Period = Union[int, float, timedelta, str]
#: the time of a call: Unix seconds (int or float) or an aware datetime
At = Union[int, float, datetime]

_PERIOD = re.compile(r"^([0-9]+)(ms|s|m|h|d)?$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class ThrottleModuleMissing(ResponseError):
    """The server has no THROTTLE commands: the redis-throttle module is not loaded."""


def module_missing(error: Exception) -> Optional[ThrottleModuleMissing]:
    """The error to raise instead of a server's `unknown command 'THROTTLE...'`, or None."""
    text = str(error)
    if type(error).__name__ != "ResponseError" or "unknown command" not in text.lower():
        return None
    if "throttle." not in text.lower():
        return None
    return ThrottleModuleMissing(
        "the THROTTLE commands are missing on this Redis server: the redis-throttle module is not loaded. "
        "Load it with `loadmodule /path/to/libredis_throttle.so` in redis.conf "
        "(or `redis-server --loadmodule /path/to/libredis_throttle.so`, "
        "or `MODULE LOAD /path/to/libredis_throttle.so` at run time). "
        f"The server said: {text}"
    )


def raise_if_module_missing(error: Exception) -> None:
    """Raises `ThrottleModuleMissing` from `error` when it says the server has no THROTTLE commands."""
    missing = module_missing(error)
    if missing is not None:
        raise missing from error


def _milliseconds(value: Union[int, float, timedelta], what: str) -> float:
    if isinstance(value, bool):
        raise TypeError(f"{what} must be seconds, a timedelta or a period string, not a bool")
    if isinstance(value, timedelta):
        return value / timedelta(milliseconds=1)
    if isinstance(value, (int, float)):
        return value * 1000
    raise TypeError(f"{what} must be seconds (int or float), a timedelta or a period string like '500ms'")


def period_arg(period: Period) -> str:
    """The module's period argument: whole seconds as a bare number, anything else in ms."""
    if isinstance(period, str):
        return period  # the module checks it and names it in its error
    if isinstance(period, int) and not isinstance(period, bool):
        if period <= 0:
            raise ValueError(f"period must be positive, got {period}")
        return str(period)
    ms = _milliseconds(period, "period")
    if ms < 1 or not math.isclose(ms, round(ms), rel_tol=0, abs_tol=1e-6):
        raise ValueError(f"period must be a whole number of milliseconds, at least 1 ms; got {period!r}")
    return f"{round(ms)}ms"


def block_ms(block: Union[Period, None]) -> Optional[int]:
    """BLOCK's milliseconds: None and 0 do not wait; math.inf waits without time-out (BLOCK 0)."""
    if block is None:
        return None
    if isinstance(block, str):
        match = _PERIOD.match(block.strip())
        if not match:
            raise ValueError(f"block must be seconds or a period like '500ms' or '5s'; got {block!r}")
        ms: float = int(match.group(1)) * _UNIT_MS[(match.group(2) or "s").lower()]
    else:
        ms = _milliseconds(block, "block")
    if ms < 0:
        raise ValueError(f"block must not be negative, got {block!r}")
    if ms == 0:
        return None
    if math.isinf(ms):
        return 0
    return math.ceil(ms)


def at_us(at: At) -> int:
    if isinstance(at, datetime):
        if at.tzinfo is None:
            raise ValueError("at must be an aware datetime (with tzinfo) or Unix seconds")
        at = at.timestamp()
    return round(at * 1_000_000)


def command(
    name: str,
    key: Any,
    limit: int,
    period: Period,
    cost: int = 1,
    block: Union[Period, None] = None,
    at: Optional[At] = None,
    burst: Optional[int] = None,
    exact: bool = False,
) -> Tuple[Any, ...]:
    args: List[Any] = [name, key, int(limit), period_arg(period)]
    if cost != 1:
        args += ["COST", int(cost)]
    if burst is not None:
        args += ["BURST", int(burst)]
    if exact:
        args.append("EXACT")
    if at is not None:
        args += ["AT", at_us(at)]
    wait = block_ms(block)
    if wait is not None:
        args += ["BLOCK", wait]
    return tuple(args)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def _pairs(reply: Any) -> Dict[str, Any]:
    """A RESP3 map or a RESP2 flat list of field-value pairs, with str field names."""
    items: Iterable[Tuple[Any, Any]] = reply.items() if isinstance(reply, dict) else zip(reply[0::2], reply[1::2])
    return {_text(k): v for k, v in items}


@dataclass(frozen=True)
class Decision:
    """One THROTTLE command's reply. Times are seconds.

    - ``allowed``: admitted (True) or limited (False); ``bool(decision)`` is the same.
    - ``limit``: the most units the key can admit at once (FIXED/SLIDING: limit, TOKEN/LEAKY: burst).
    - ``remaining``: units still admissible right now, after this call.
    - ``retry_after``: when to act. Admitted: 0.0 (LEAKY: the queue delay); limited: until the same call
      would be admitted; ``math.inf`` when it never can (cost above limit or burst).
    - ``reset_after``: until the key is idle again (its PTTL); 0.0 when it holds nothing.
    """

    allowed: bool
    limit: int
    remaining: int
    retry_after: float
    reset_after: float

    def __bool__(self) -> bool:
        return self.allowed

    @classmethod
    def from_reply(cls, reply: Any) -> "Decision":
        if isinstance(reply, dict):
            fields = _pairs(reply)
            values = [fields[name] for name in ("allowed", "limit", "remaining", "retry_after", "reset_after")]
        else:
            values = list(reply)
        allowed, limit, remaining, retry_after, reset_after = (int(v) for v in values)
        return cls(
            allowed=bool(allowed),
            limit=limit,
            remaining=remaining,
            retry_after=math.inf if retry_after < 0 else retry_after / 1000,
            reset_after=reset_after / 1000,
        )


@dataclass(frozen=True)
class AllDecision:
    """THROTTLE.ALL's reply: admitted only if every limit admits; one Decision per spec, in order."""

    allowed: bool
    decisions: Tuple[Decision, ...]

    def __bool__(self) -> bool:
        return self.allowed

    @property
    def retry_after(self) -> float:
        """Seconds until every limit admits the call (0.0 when admitted)."""
        if self.allowed:
            return 0.0
        return max(d.retry_after for d in self.decisions)

    @classmethod
    def from_reply(cls, reply: Any) -> "AllDecision":
        return cls(bool(int(reply[0])), tuple(Decision.from_reply(r) for r in reply[1:]))


@dataclass(frozen=True)
class Spec:
    """One limit of THROTTLE.ALL. Build it with Spec.fixed, Spec.sliding, Spec.token or Spec.leaky."""

    algorithm: str
    key: Any
    limit: int
    period: Period
    burst: Optional[int] = None
    exact: bool = False

    @classmethod
    def fixed(cls, key: Any, limit: int, period: Period) -> "Spec":
        return cls("FIXED", key, limit, period)

    @classmethod
    def sliding(cls, key: Any, limit: int, period: Period, exact: bool = False) -> "Spec":
        return cls("SLIDING", key, limit, period, exact=exact)

    @classmethod
    def token(cls, key: Any, limit: int, period: Period, burst: Optional[int] = None) -> "Spec":
        return cls("TOKEN", key, limit, period, burst=burst)

    @classmethod
    def leaky(cls, key: Any, limit: int, period: Period, burst: Optional[int] = None) -> "Spec":
        return cls("LEAKY", key, limit, period, burst=burst)

    def args(self) -> List[Any]:
        args = [self.algorithm, self.key, int(self.limit), period_arg(self.period)]
        if self.burst is not None:
            args += ["BURST", int(self.burst)]
        if self.exact:
            args.append("EXACT")
        return args


def all_command(specs: Tuple[Spec, ...], cost: int, at: Optional[At]) -> Tuple[Any, ...]:
    if not specs:
        raise ValueError("all() needs at least one Spec")
    args: List[Any] = ["THROTTLE.ALL"]
    if cost != 1:
        args += ["COST", int(cost)]
    if at is not None:
        args += ["AT", at_us(at)]
    for spec in specs:
        args += spec.args()
    return tuple(args)


def _info_value(name: str, value: Any) -> Any:
    if name == "algorithm":
        return _text(value)
    if name == "leases":  # a lease key's holders: (token, ends_at in Unix µs, ms left), earliest end first
        return [(_text(token), int(ends_at), int(left)) for token, ends_at, left in value]
    return int(value)


def info_from_reply(reply: Any) -> Optional[Dict[str, Any]]:
    """THROTTLE.INFO's fields by name (``algorithm`` as str, a lease key's ``leases`` as a list of (token,
    ends_at µs, ms left) tuples, the rest as int), or None for a missing key."""
    if reply is None:
        return None
    return {name: _info_value(name, value) for name, value in _pairs(reply).items()}
