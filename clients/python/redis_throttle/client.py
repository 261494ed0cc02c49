"""Throttle and AsyncThrottle: the THROTTLE commands on a redis-py (or valkey-py) client."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple, TypeVar, Union

from ._core import (
    AllDecision,
    At,
    Decision,
    Penalties,
    Period,
    Spec,
    all_command,
    command,
    info_from_reply,
    raise_if_module_missing,
)
from .concurrency import (
    AsyncConcurrency,
    Concurrency,
    LeaseDecision,
    OnLost,
    Renew,
    Token,
    acquire_command,
    acquire_parser,
    check_block,
    held,
    release_command,
    renew_command,
)

T = TypeVar("T")


class _Commands:
    """What Throttle and AsyncThrottle share: the client, and the clock if one is injected."""

    def __init__(self, client: Any, clock: Optional[Callable[[], At]] = None) -> None:
        """``client``: redis.Redis, redis.cluster.RedisCluster, their redis.asyncio twins, or valkey's.

        ``clock``: a function returning the time (Unix seconds or an aware datetime) that every call without
        ``at=`` is sent with (the module's AT). None, the default, lets the server's clock decide; a test of
        an app passes its own clock to step through windows and bans without waiting.
        """
        self.client = client
        self.clock = clock

    def _at(self, at: Optional[At]) -> Optional[At]:
        return self.clock() if at is None and self.clock is not None else at


class Throttle(_Commands):
    """The THROTTLE commands on a synchronous client; each method is one command, one round trip.

    ``period`` and ``block`` take seconds (int or float), a ``timedelta`` or the module's period strings
    (``"500ms"``, ``"1s"``, ``"15m"``). ``block``: wait on the server up to that long for a limited call to
    be admitted (None or 0: answer at once; ``math.inf``: no time-out). ``at``: the call's time (Unix seconds
    or an aware datetime) instead of the server's clock, for tests and replays (``Throttle(client, clock=...)``
    sends every call's time from a clock).

    Penalties, on every method (the module's options of the same names):

    - ``ban``: when this call is refused, ban the key for this long (a period, as ``period``); while banned,
      every call on the key is refused, and when the ban ends the key is idle. ``renew=True``: each refused
      call during the ban restarts it; ``backoff=max``: each refused call doubles it, up to ``max``;
      ``ban_now=True``: ban the key now, whatever it holds.
    - ``tally``: a refused call's units count against the limit all the same, until the key counts ``tally``.
    - ``force=True``: take the units whether or not they fit.
    - ``detail=True``: the Decision carries ``hits``, ``banned`` and ``next_free``.
    """

    def _run(self, args: Tuple[Any, ...], parse: Callable[[Any], T]) -> T:
        try:
            reply = self.client.execute_command(*args)
        except Exception as error:
            raise_if_module_missing(error)
            raise
        return parse(reply)

    def fixed(self, key: Any, limit: int, period: Period, cost: int = 1, block: Optional[Period] = None, *,
              at: Optional[At] = None, ban: Optional[Period] = None, renew: bool = False,
              backoff: Optional[Period] = None, tally: Optional[int] = None, force: bool = False,
              ban_now: bool = False, detail: bool = False) -> Decision:
        """THROTTLE.FIXED: at most ``limit`` units per window of ``period``, opened by the first admitted call."""
        penalties = Penalties(ban, renew, backoff, tally, force, ban_now)
        args = command("THROTTLE.FIXED", key, limit, period, cost, block, self._at(at),
                       penalties=penalties, detail=detail)
        return self._run(args, Decision.from_reply)

    def sliding(self, key: Any, limit: int, period: Period, cost: int = 1, block: Optional[Period] = None, *,
                exact: bool = False, floor: bool = False, at: Optional[At] = None, ban: Optional[Period] = None,
                renew: bool = False, backoff: Optional[Period] = None, tally: Optional[int] = None,
                force: bool = False, ban_now: bool = False, detail: bool = False) -> Decision:
        """THROTTLE.SLIDING: the sliding-window counter, or with ``exact=True`` the exact sliding log.

        ``floor=True`` (the counter only) counts the previous window's weighted share in whole units, rounded
        down, as limits does: a client keeping exactly to the rate is admitted every time.
        """
        penalties = Penalties(ban, renew, backoff, tally, force, ban_now)
        args = command("THROTTLE.SLIDING", key, limit, period, cost, block, self._at(at),
                       exact=exact, floor=floor, penalties=penalties, detail=detail)
        return self._run(args, Decision.from_reply)

    def token(self, key: Any, limit: int, period: Period, cost: int = 1, block: Optional[Period] = None, *,
              burst: Optional[int] = None, at: Optional[At] = None, ban: Optional[Period] = None,
              renew: bool = False, backoff: Optional[Period] = None, tally: Optional[int] = None,
              force: bool = False, ban_now: bool = False, detail: bool = False) -> Decision:
        """THROTTLE.TOKEN: a bucket of ``burst`` (default ``limit``) tokens refilled at ``limit`` per ``period``."""
        penalties = Penalties(ban, renew, backoff, tally, force, ban_now)
        args = command("THROTTLE.TOKEN", key, limit, period, cost, block, self._at(at),
                       burst=burst, penalties=penalties, detail=detail)
        return self._run(args, Decision.from_reply)

    def leaky(self, key: Any, limit: int, period: Period, cost: int = 1, block: Optional[Period] = None, *,
              burst: Optional[int] = None, at: Optional[At] = None, ban: Optional[Period] = None,
              renew: bool = False, backoff: Optional[Period] = None, tally: Optional[int] = None,
              force: bool = False, ban_now: bool = False, detail: bool = False) -> Decision:
        """THROTTLE.LEAKY: a queue of ``burst`` (default ``limit``) units drained at ``limit`` per ``period``."""
        penalties = Penalties(ban, renew, backoff, tally, force, ban_now)
        args = command("THROTTLE.LEAKY", key, limit, period, cost, block, self._at(at),
                       burst=burst, penalties=penalties, detail=detail)
        return self._run(args, Decision.from_reply)

    def all(self, *specs: Spec, cost: int = 1, at: Optional[At] = None, detail: bool = False) -> AllDecision:
        """THROTTLE.ALL: every limit admits and consumes, or none changes. In a cluster the keys share a slot.

        Each Spec carries its own penalties; ``detail=True`` gives every Decision its three more fields.
        """
        return self._run(all_command(specs, cost, self._at(at), detail), AllDecision.from_reply)

    def info(self, key: Any) -> Optional[Dict[str, Union[str, int]]]:
        """THROTTLE.INFO: the key's algorithm and state as the module reports them, or None."""
        return self._run(("THROTTLE.INFO", key), info_from_reply)

    # Concurrency limits (leases): the logic is in concurrency.py.

    def acquire(self, key: Any, limit: int, lease: Period, block: Optional[Period] = None, *, id: Optional[Token] = None, at: Optional[At] = None) -> LeaseDecision:
        """THROTTLE.ACQUIRE: one of ``limit`` slots of ``key`` for ``lease``; admitted, the decision has its token."""
        check_block(self.client, key, block)
        at = self._at(at)
        return self._run(acquire_command(key, limit, lease, block, id, at), acquire_parser(lease, id, at))

    def release(self, key: Any, token: Token, *, at: Optional[At] = None) -> bool:
        """THROTTLE.RELEASE: frees the token's slot; False when it held none (nothing changed)."""
        return self._run(release_command(key, token, self._at(at)), held)

    def renew(self, key: Any, token: Token, lease: Period, *, at: Optional[At] = None) -> bool:
        """THROTTLE.RENEW: the token's lease now ends ``lease`` from now; False when it held none (nothing changed)."""
        return self._run(renew_command(key, token, lease, self._at(at)), held)

    def concurrency(self, key: Any, limit: int, lease: Period, block: Optional[Period] = None, *, id: Optional[Token] = None, renew: Renew = False, on_lost: Optional[OnLost] = None) -> Concurrency:
        """``with throttle.concurrency(key, limit, lease) as lease:``: at most ``limit`` holders at once (see Concurrency)."""
        return Concurrency(self, key, limit, lease, block, id=id, renew=renew, on_lost=on_lost)


class AsyncThrottle(_Commands):
    """Throttle for asyncio clients (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster, valkey.asyncio):
    the same methods and options, as coroutines."""

    async def _run(self, args: Tuple[Any, ...], parse: Callable[[Any], T]) -> T:
        try:
            reply = await self.client.execute_command(*args)
        except Exception as error:
            raise_if_module_missing(error)
            raise
        return parse(reply)

    async def fixed(self, key: Any, limit: int, period: Period, cost: int = 1, block: Optional[Period] = None, *,
                    at: Optional[At] = None, ban: Optional[Period] = None, renew: bool = False,
                    backoff: Optional[Period] = None, tally: Optional[int] = None, force: bool = False,
                    ban_now: bool = False, detail: bool = False) -> Decision:
        penalties = Penalties(ban, renew, backoff, tally, force, ban_now)
        args = command("THROTTLE.FIXED", key, limit, period, cost, block, self._at(at),
                       penalties=penalties, detail=detail)
        return await self._run(args, Decision.from_reply)

    async def sliding(self, key: Any, limit: int, period: Period, cost: int = 1, block: Optional[Period] = None, *,
                      exact: bool = False, floor: bool = False, at: Optional[At] = None,
                      ban: Optional[Period] = None, renew: bool = False, backoff: Optional[Period] = None,
                      tally: Optional[int] = None, force: bool = False, ban_now: bool = False,
                      detail: bool = False) -> Decision:
        penalties = Penalties(ban, renew, backoff, tally, force, ban_now)
        args = command("THROTTLE.SLIDING", key, limit, period, cost, block, self._at(at),
                       exact=exact, floor=floor, penalties=penalties, detail=detail)
        return await self._run(args, Decision.from_reply)

    async def token(self, key: Any, limit: int, period: Period, cost: int = 1, block: Optional[Period] = None, *,
                    burst: Optional[int] = None, at: Optional[At] = None, ban: Optional[Period] = None,
                    renew: bool = False, backoff: Optional[Period] = None, tally: Optional[int] = None,
                    force: bool = False, ban_now: bool = False, detail: bool = False) -> Decision:
        penalties = Penalties(ban, renew, backoff, tally, force, ban_now)
        args = command("THROTTLE.TOKEN", key, limit, period, cost, block, self._at(at),
                       burst=burst, penalties=penalties, detail=detail)
        return await self._run(args, Decision.from_reply)

    async def leaky(self, key: Any, limit: int, period: Period, cost: int = 1, block: Optional[Period] = None, *,
                    burst: Optional[int] = None, at: Optional[At] = None, ban: Optional[Period] = None,
                    renew: bool = False, backoff: Optional[Period] = None, tally: Optional[int] = None,
                    force: bool = False, ban_now: bool = False, detail: bool = False) -> Decision:
        penalties = Penalties(ban, renew, backoff, tally, force, ban_now)
        args = command("THROTTLE.LEAKY", key, limit, period, cost, block, self._at(at),
                       burst=burst, penalties=penalties, detail=detail)
        return await self._run(args, Decision.from_reply)

    async def all(self, *specs: Spec, cost: int = 1, at: Optional[At] = None, detail: bool = False) -> AllDecision:
        return await self._run(all_command(specs, cost, self._at(at), detail), AllDecision.from_reply)

    async def info(self, key: Any) -> Optional[Dict[str, Union[str, int]]]:
        return await self._run(("THROTTLE.INFO", key), info_from_reply)

    # Concurrency limits (leases): the logic is in concurrency.py.

    async def acquire(self, key: Any, limit: int, lease: Period, block: Optional[Period] = None, *, id: Optional[Token] = None, at: Optional[At] = None) -> LeaseDecision:
        check_block(self.client, key, block)
        at = self._at(at)
        return await self._run(acquire_command(key, limit, lease, block, id, at), acquire_parser(lease, id, at))

    async def release(self, key: Any, token: Token, *, at: Optional[At] = None) -> bool:
        return await self._run(release_command(key, token, self._at(at)), held)

    async def renew(self, key: Any, token: Token, lease: Period, *, at: Optional[At] = None) -> bool:
        return await self._run(renew_command(key, token, lease, self._at(at)), held)

    def concurrency(self, key: Any, limit: int, lease: Period, block: Optional[Period] = None, *, id: Optional[Token] = None, renew: Renew = False, on_lost: Optional[OnLost] = None) -> AsyncConcurrency:
        """``async with throttle.concurrency(key, limit, lease) as lease:`` (see AsyncConcurrency)."""
        return AsyncConcurrency(self, key, limit, lease, block, id=id, renew=renew, on_lost=on_lost)
