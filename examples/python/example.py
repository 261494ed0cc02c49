#!/usr/bin/env python3
"""The throttle module from Python with redis-py (Debian's python3-redis, or
`pip install redis`): a typed reply, a sliding window, two limits at once,
THROTTLE.INFO, BLOCK and an error. Exact values are asserted, with time
driven by AT; the BLOCK part waits for real and checks the time it took.

    REDIS_PORT=6399 python3 examples/python/example.py      (after `make run`)
"""
import os
import sys
import time
from typing import NamedTuple

import redis


class Reply(NamedTuple):
    """The five integers every THROTTLE command answers."""

    allowed: bool
    limit: int
    remaining: int
    retry_after_ms: int
    reset_after_ms: int

    @classmethod
    def parse(cls, raw):
        allowed, limit, remaining, retry_after, reset_after = raw
        return cls(bool(allowed), limit, remaining, retry_after, reset_after)


def throttle(r, algorithm, key, limit, period, **options):
    """THROTTLE.<algorithm> key limit period [COST n] [AT µs] [BURST b] [BLOCK ms] [EXACT]."""
    args = [f"THROTTLE.{algorithm.upper()}", key, limit, period]
    for name in ("cost", "at", "burst", "block"):
        if options.get(name) is not None:
            args += [name.upper(), options[name]]
    if options.get("exact"):
        args.append("EXACT")
    return Reply.parse(r.execute_command(*args))


failures = 0


def check(what, got, want):
    global failures
    ok = got == want
    print(f"{'ok ' if ok else 'MISMATCH'} {what}: {got!r}" + ("" if ok else f", expected {want!r}"))
    failures += not ok


def main():
    r = redis.Redis(host=os.environ.get("REDIS_HOST", "127.0.0.1"), port=int(os.environ.get("REDIS_PORT", "6399")))
    p = "example:py:"
    r.delete(p + "bob", p + "{u42}:s", p + "{u42}:h", p + "mail", p + "str")

    # Sliding window counter: at 12 s the previous window (0-10 s, 10 units)
    # still counts for 8 of the 10 allowed.
    check("sliding, previous window full", throttle(r, "sliding", p + "bob", 10, "10s", cost=10, at=9_000_000),
          Reply(True, 10, 0, 0, 11_000))
    check("sliding, 8 of 10 still counted", throttle(r, "sliding", p + "bob", 10, "10s", at=12_000_000),
          Reply(True, 10, 1, 0, 18_000))
    check("sliding, last unit", throttle(r, "sliding", p + "bob", 10, "10s", at=12_000_000),
          Reply(True, 10, 0, 0, 18_000))
    check("sliding, limited for 1 s", throttle(r, "sliding", p + "bob", 10, "10s", at=12_000_000),
          Reply(False, 10, 0, 1_000, 18_000))

    # Two limits in one atomic call: 2 per second and 3 per hour.
    at = 1_700_000_000_000_000

    def both(at):
        reply = r.execute_command("THROTTLE.ALL", "AT", at,
                                  "FIXED", p + "{u42}:s", 2, "1s", "FIXED", p + "{u42}:h", 3, "1h")
        return bool(reply[0]), [Reply.parse(x) for x in reply[1:]]

    check("ALL, first", both(at), (True, [Reply(True, 2, 1, 0, 1000), Reply(True, 3, 2, 0, 3_600_000)]))
    check("ALL, second", both(at), (True, [Reply(True, 2, 0, 0, 1000), Reply(True, 3, 1, 0, 3_600_000)]))
    # The per-second limit refuses; the hourly one admits but consumes nothing.
    check("ALL, per-second limit hit", both(at),
          (False, [Reply(False, 2, 0, 1000, 1000), Reply(True, 3, 1, 0, 3_600_000)]))
    check("ALL, next second", both(at + 1_000_000),
          (True, [Reply(True, 2, 1, 0, 1000), Reply(True, 3, 0, 0, 3_599_000)]))
    check("ALL, hourly limit hit", both(at + 1_000_000),
          (False, [Reply(True, 2, 1, 0, 1000), Reply(False, 3, 0, 3_599_000, 3_599_000)]))

    # THROTTLE.INFO: field-value pairs; nil for a missing key. A fixed window
    # keeps its start and the units used (each call brings the limit); its
    # reset_after is the key's TTL, counting down from the 3_599_000 ms the
    # last call answered.
    info = r.execute_command("THROTTLE.INFO", p + "{u42}:h", "AT", at + 1_000_000)
    info = {k.decode(): v.decode() if isinstance(v, bytes) else v for k, v in zip(info[::2], info[1::2])}
    ttl = info.pop("reset_after", None)
    check("INFO", info, {"algorithm": "fixed", "window_start": at, "used": 3})
    check("INFO reset_after is the TTL", isinstance(ttl, int) and 3_590_000 < ttl <= 3_599_000, True)
    check("INFO on a missing key", r.execute_command("THROTTLE.INFO", p + "nothing"), None)

    # BLOCK: wait on the server instead of sleeping and retrying. 10 tokens a
    # second: with the bucket empty, the next token comes within 100 ms.
    started = time.monotonic()
    throttle(r, "token", p + "mail", 10, "1s", cost=10)
    reply = throttle(r, "token", p + "mail", 10, "1s", block=5000)
    waited = time.monotonic() - started
    check("BLOCK admitted", reply.allowed, True)
    check("BLOCK admitted when the next token came, 100 ms after the bucket emptied", 0.095 <= waited < 2.0, True)
    print(f"    ({waited * 1000:.0f} ms)")

    # Bad input is an error; being limited is not.
    try:
        throttle(r, "token", p + "bob", 10, "1 s")
        check("bad period", "no error", "an error")
    except redis.ResponseError as e:
        check("bad period", str(e).split(":")[0], "invalid period")
    r.set(p + "str", "x")
    try:
        throttle(r, "fixed", p + "str", 1, 1)
        check("WRONGTYPE", "no error", "an error")
    except redis.ResponseError as e:
        check("WRONGTYPE", str(e).split()[0], "WRONGTYPE")

    r.delete(p + "bob", p + "{u42}:s", p + "{u42}:h", p + "mail", p + "str")
    if failures:
        print(f"python example: {failures} mismatches")
        return 1
    print("python example: every reply as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
