"""Requests through a framework's test client, as the tests compare them."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

#: the rate-limit headers Flask-Limiter and SlowAPI send
HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")


Request = Tuple[int, Dict[str, Optional[str]], Tuple[float, float]]


def sequence(get: Callable[[str], Any], n: int, path: str) -> List[Request]:
    """`n` GETs of `path`: each one's status, rate-limit headers, and when it was sent and answered (the
    tests bracket times between the two, never assume how long a request takes)."""
    out = []
    for _ in range(n):
        sent = time.time()
        response = get(path)
        out.append((response.status_code, {name: response.headers.get(name) for name in HEADERS}, (sent, time.time())))
    return out
