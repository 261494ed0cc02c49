"""Requests through a framework's test client, as the tests compare them."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

#: the rate-limit headers Flask-Limiter and SlowAPI send
HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After")


def sequence(get: Callable[[str], Any], n: int, path: str) -> List[Tuple[int, Dict[str, Optional[str]], float]]:
    """`n` GETs of `path`: each one's status, rate-limit headers and when it was answered."""
    out = []
    for _ in range(n):
        response = get(path)
        out.append((response.status_code, {name: response.headers.get(name) for name in HEADERS}, time.time()))
    return out
