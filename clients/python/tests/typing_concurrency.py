"""Checked by test_typing.py with mypy --strict: what the lease API gives a typed caller."""

from __future__ import annotations

from typing import Optional

from redis_throttle import AsyncThrottle, ConcurrencyLimitExceeded, Lease, LeaseDecision, LeaseLost, Throttle
from redis_throttle.concurrency import Token


def sync_use(throttle: Throttle) -> float:
    lease: Lease
    try:
        with throttle.concurrency("jobs", 3, "30s", block=5, renew=True, on_lost=lambda lost: None) as lease:
            token: Token = lease.token
            ends: float = lease.ends
            still_held: bool = not lease.lost
    except ConcurrencyLimitExceeded as refused:
        return refused.retry_after
    except LeaseLost as lost:
        return lost.lease.ends
    decision: LeaseDecision = throttle.acquire("jobs", 3, 30, id="worker-7")
    named: Optional[Token] = decision.token
    if named is not None:
        renewed: bool = throttle.renew("jobs", named, 30)
        freed: bool = throttle.release("jobs", named)
        return float(renewed and freed and still_held) + ends + len(token)
    return decision.retry_after


async def async_use(throttle: AsyncThrottle) -> float:
    async def report(lease: Lease) -> None:
        print("lost", lease.token)

    async with throttle.concurrency("jobs", 3, 30, renew="10s", on_lost=report) as lease:
        ends: float = lease.ends
    decision: LeaseDecision = await throttle.acquire("jobs", 3, 30, block=1.5)
    if decision.token is not None:
        freed: bool = await throttle.release("jobs", decision.token)
        return float(freed) + ends
    return decision.retry_after
