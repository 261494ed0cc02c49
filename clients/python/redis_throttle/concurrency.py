"""Concurrency limits on the module's leases: THROTTLE.ACQUIRE, THROTTLE.RELEASE and THROTTLE.RENEW.

A key is a counting semaphore of ``limit`` slots; a caller that gets a slot holds a *lease* on it, named by a
token, for ``lease`` (a period). ``Throttle.concurrency()`` / ``AsyncThrottle.concurrency()`` wrap the three
commands in a context manager: acquire on enter (waiting on the server, in arrival order, up to ``block``),
release on exit (also on an exception), and, with ``renew``, renew in the background while the body runs.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
import time
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple, Type, Union

from ._core import _PERIOD, _UNIT_MS, At, Decision, Period, _milliseconds, _pairs, _text, at_us, block_ms, period_arg

if TYPE_CHECKING:
    from .client import AsyncThrottle, Throttle

#: a lease's token: the server makes one (32 hex digits, a str), or the caller names it with ``id=`` (str or bytes)
Token = Union[str, bytes]
#: ``renew=``: False (no renewal), True (every third of the lease), or the interval (a period, as ``lease``)
Renew = Union[bool, Period]
#: ``on_lost=``: called once with the lease when a renewal answers that the lease is no longer held
OnLost = Callable[["Lease"], Any]

_FIELDS = ("allowed", "limit", "remaining", "retry_after", "reset_after")


class ConcurrencyLimitExceeded(Exception):
    """``concurrency()`` found every slot of ``key`` held (after waiting up to ``block``, if it waited).

    ``retry_after``: seconds until enough leases end for a slot to free if nothing else happens (the module's
    reply); ``decision``: the whole refused reply.
    """

    def __init__(self, key: Any, decision: "LeaseDecision", block: Optional[Period] = None) -> None:
        self.key = key
        self.limit = decision.limit
        self.retry_after = decision.retry_after
        self.decision = decision
        waited = "" if block_ms(block) is None else f" after waiting {block!r}"
        super().__init__(
            f"concurrency limit of {decision.limit} reached on {_text(key)!r}: every slot is held{waited}; "
            f"one frees in {decision.retry_after:g} s unless released sooner"
        )


class LeaseLost(Exception):
    """The lease ended before ``concurrency()`` released it: its holder may have overlapped another one.

    Raised on leaving the ``with`` block when a renewal or the release answered that the token no longer held
    a lease (it ran past its end, or the key was deleted). ``lease`` is the lost Lease.
    """

    def __init__(self, lease: "Lease") -> None:
        self.lease = lease
        how = "a renewal" if lease.renewal_lost else "the release"
        super().__init__(
            f"the lease {_text(lease.token)!r} on {_text(lease.key)!r} ended before it was released "
            f"({how} found it no longer held): another holder may have had the slot meanwhile"
        )


@dataclass(frozen=True)
class LeaseDecision:
    """THROTTLE.ACQUIRE's reply. Times are seconds.

    - ``allowed``: admitted (True) or refused (False); ``bool(decision)`` is the same.
    - ``limit``: the call's limit; ``remaining``: free slots after this call.
    - ``retry_after``: refused: until enough leases end for a slot to free (0.0 when admitted).
    - ``reset_after``: until the key's last lease ends (its PTTL).
    - ``token``: the lease's token when admitted (the ``id`` given, or the one the server made), else None.
    - ``ends``: when admitted, when the lease ends unless renewed or released, as Unix seconds: ``at`` plus the
      lease for a call with ``at``, else this process's clock when the reply arrived plus the lease (the
      server's end is at most that reply's trip earlier, give or take the two clocks' difference).
    """

    allowed: bool
    limit: int
    remaining: int
    retry_after: float
    reset_after: float
    token: Optional[Token] = None
    ends: Optional[float] = None

    def __bool__(self) -> bool:
        return self.allowed


class Lease:
    """A slot held: what ``concurrency()`` yields.

    - ``key``, ``token``, ``limit``; ``lease``: its length in seconds.
    - ``ends``: when it ends unless renewed (Unix seconds, see ``LeaseDecision.ends``); each renewal moves it.
    - ``renewals``: renewals that kept it; ``renew_error``: the last exception a background renewal raised
      (the renewal is tried again at the next interval), or None.
    - ``lost``: True once a renewal or the release answered that the token held no lease any more;
      ``renewal_lost``: True when a renewal found it (the renewals then stop, and exit sends no release).
    - ``released``: True once the exit's release freed the slot.
    - ``decision``: the admitting reply.
    """

    def __init__(self, key: Any, decision: LeaseDecision, lease: float) -> None:
        assert decision.token is not None and decision.ends is not None
        self.key = key
        self.token: Token = decision.token
        self.limit = decision.limit
        self.lease = lease
        self.ends: float = decision.ends
        self.decision = decision
        self.renewals = 0
        self.renew_error: Optional[BaseException] = None
        self.lost = False
        self.renewal_lost = False
        self.released = False

    def __repr__(self) -> str:
        state = "lost" if self.lost else "released" if self.released else "held"
        return f"Lease(key={self.key!r}, token={self.token!r}, ends={self.ends:.3f}, {state})"


# ---------------------------------------------------------------------------
# Arguments in, replies out
# ---------------------------------------------------------------------------


def lease_seconds(lease: Period, what: str = "lease") -> float:
    """A period in seconds, checked as the module checks it: positive, whole milliseconds."""
    if isinstance(lease, str):
        match = _PERIOD.match(lease.strip())
        if not match or int(match.group(1)) == 0:
            raise ValueError(
                f"{what} must be a positive period: seconds, a timedelta, or a string like '500ms', '30s', '5m'; "
                f"got {lease!r}"
            )
        return int(match.group(1)) * _UNIT_MS[(match.group(2) or "s").lower()] / 1000
    try:
        ms = _milliseconds(lease, what)
    except TypeError as error:
        raise TypeError(str(error).replace("a period string", "a period string like '30s'")) from None
    if ms < 1 or not math.isclose(ms, round(ms), rel_tol=0, abs_tol=1e-6):
        raise ValueError(f"{what} must be a whole number of milliseconds, at least 1 ms; got {lease!r}")
    return round(ms) / 1000


def _lease_arg(lease: Period) -> str:
    lease_seconds(lease)  # the checks, with the argument's name
    return period_arg(lease)


def acquire_command(
    key: Any, limit: int, lease: Period, block: Optional[Period], id: Optional[Token], at: Optional[At]
) -> Tuple[Any, ...]:
    args: List[Any] = ["THROTTLE.ACQUIRE", key, int(limit), _lease_arg(lease)]
    if id is not None:
        args += ["ID", id]
    if at is not None:
        args += ["AT", at_us(at)]
    wait = block_ms(block)
    if wait is not None:
        args += ["BLOCK", wait]
    return tuple(args)


def release_command(key: Any, token: Token, at: Optional[At]) -> Tuple[Any, ...]:
    args: List[Any] = ["THROTTLE.RELEASE", key, token]
    if at is not None:
        args += ["AT", at_us(at)]
    return tuple(args)


def renew_command(key: Any, token: Token, lease: Period, at: Optional[At]) -> Tuple[Any, ...]:
    args: List[Any] = ["THROTTLE.RENEW", key, token, _lease_arg(lease)]
    if at is not None:
        args += ["AT", at_us(at)]
    return tuple(args)


def held(reply: Any) -> bool:
    """RELEASE's and RENEW's reply: 1 (the token held a lease) or 0 (it did not; nothing changed)."""
    return bool(int(reply))


def acquire_parser(lease: Period, id: Optional[Token], at: Optional[At]) -> Callable[[Any], LeaseDecision]:
    """Reads an ACQUIRE reply: RESP2's five integers and the token, or RESP3's map, bytes or decoded."""
    seconds = lease_seconds(lease)

    def parse(reply: Any) -> LeaseDecision:
        if isinstance(reply, dict):
            fields = _pairs(reply)
            values = [fields[name] for name in _FIELDS]
            token = fields.get("token")
        else:
            items = list(reply)
            values, token = items[:5], (items[5] if len(items) > 5 else None)
        decision = Decision.from_reply(values)
        if not decision.allowed or token is None:
            return LeaseDecision(False, decision.limit, decision.remaining, decision.retry_after, decision.reset_after)
        start = at_us(at) / 1_000_000 if at is not None else time.time()
        return LeaseDecision(
            True, decision.limit, decision.remaining, decision.retry_after, decision.reset_after,
            token=id if id is not None else _text(token), ends=start + seconds,
        )

    return parse


def renew_interval(renew: Renew, lease: float) -> Optional[float]:
    """Seconds between background renewals: None (no renewal), a third of the lease for True, or the interval."""
    if isinstance(renew, bool):
        return lease / 3 if renew else None
    if isinstance(renew, (int, float)) and renew == 0:
        return None  # as block=0: nothing
    every = lease_seconds(renew, "renew")
    if every >= lease:
        raise ValueError(
            f"renew must be shorter than the lease ({lease:g} s), or the lease ends before it is renewed; "
            f"got {renew!r}"
        )
    return every


_UNKNOWN = object()


def _socket_timeout(client: Any, key: Any) -> Any:
    """The read time-out the client's connections for `key` use (None: none), or _UNKNOWN.

    Read from the connection arguments the client was made with: redis.Redis(...) and valkey's name it
    (redis-py 8 and valkey-py default to 5 s); a client made from a URL without ``socket_timeout`` does not,
    and is not checked.
    """
    try:
        pool = getattr(client, "connection_pool", None)
        if pool is not None:
            kwargs = pool.connection_kwargs
        elif isinstance(getattr(client, "connection_kwargs", None), dict):  # redis.asyncio.cluster.RedisCluster
            kwargs = client.connection_kwargs
        else:  # redis.cluster.RedisCluster: the pool of the node that serves the key
            kwargs = client.get_node_from_key(key).redis_connection.connection_pool.connection_kwargs
    except Exception:
        return _UNKNOWN
    return kwargs["socket_timeout"] if isinstance(kwargs, dict) and "socket_timeout" in kwargs else _UNKNOWN


def check_block(client: Any, key: Any, block: Optional[Period]) -> None:
    """Refuses, before sending, a wait on the server longer than the client waits for a reply.

    A blocked THROTTLE.ACQUIRE holds its connection until the server answers. If the client's socket_timeout
    ends first, redis-py drops the connection (the server forgets the waiter) and sends the call again: the
    caller loses its place in the queue each time, and a call let in just as its connection closed holds a
    slot its caller never hears of. So the client's socket_timeout must be at least ``block`` + 1 s (None
    for ``block=math.inf``).
    """
    wait = block_ms(block)
    if wait is None:
        return
    timeout = _socket_timeout(client, key)
    if timeout is _UNKNOWN or timeout is None:
        return
    if wait == 0 or float(timeout) < wait / 1000 + 1:
        enough = "" if wait == 0 else f" or of at least {wait / 1000 + 1:g} s (block + 1 s)"
        raise ValueError(
            f"block={block!r} waits on the server longer than this client waits for a reply "
            f"(its socket_timeout is {timeout!r} s): give the client socket_timeout=None{enough}, "
            f"e.g. redis.Redis(..., socket_timeout=None), or wait less"
        )


# ---------------------------------------------------------------------------
# The context managers
# ---------------------------------------------------------------------------


def _sent_maybe(error: BaseException) -> bool:
    """Whether an acquire that raised `error` may have been let in on the server: anything but an argument
    refused before sending (ValueError, TypeError) or the server's own error reply (a ResponseError of
    redis-py or valkey-py: a bad argument, WRONGTYPE, no module)."""
    if isinstance(error, (ValueError, TypeError)):
        return False
    return not any(cls.__name__ == "ResponseError" for cls in type(error).__mro__)


class _Held:
    """What the sync and async context managers share: the arguments, checked before anything is sent."""

    def __init__(self, key: Any, limit: int, lease: Period, block: Optional[Period], id: Optional[Token],
                 renew: Renew, on_lost: Optional[OnLost]) -> None:
        self.key, self.limit, self.lease_period, self.block, self.id = key, limit, lease, block, id
        self.seconds = lease_seconds(lease)
        self.every = renew_interval(renew, self.seconds)
        block_ms(block)  # a bad block fails here, before any command
        if id is not None and not isinstance(id, (str, bytes)):
            raise TypeError(f"id must be a str or bytes token, not {type(id).__name__}")
        self.on_lost = on_lost
        self.lease: Optional[Lease] = None

    def _token(self) -> Token:
        """The lease's name: ``id``, or a random 128-bit token like the server's (32 hex digits), named here so
        that an acquire whose reply never comes (a dropped connection, a cancelled task) can still be released,
        and a call sent again by the client's retries renews the same lease instead of taking a second slot."""
        return self.id if self.id is not None else uuid.uuid4().hex

    def _admitted(self, decision: LeaseDecision) -> Lease:
        if not decision:
            raise ConcurrencyLimitExceeded(self.key, decision, self.block)
        self.lease = Lease(self.key, decision, self.seconds)
        return self.lease

    def _renewed(self, lease: Lease, still_held: bool) -> bool:
        """Records a renewal's answer; False when the lease is lost (the renewals stop)."""
        if still_held:
            lease.renewals += 1
            lease.ends = time.time() + self.seconds
            return True
        lease.lost = lease.renewal_lost = True
        return False

    def _released(self, lease: Lease, freed: bool, failed: bool) -> None:
        """After the exit's release: raises LeaseLost when the body ended well but the lease did not."""
        lease.released = freed
        if not freed:
            lease.lost = True
        if lease.lost and not failed:
            raise LeaseLost(lease)


class Concurrency(_Held):
    """``Throttle.concurrency()``: ``with throttle.concurrency(key, limit, lease) as lease: ...``.

    Enter: THROTTLE.ACQUIRE (with BLOCK when ``block`` waits); refused: ``ConcurrencyLimitExceeded``. Exit:
    stops the renewal thread, then THROTTLE.RELEASE with the lease's token, also when the body raised;
    ``LeaseLost`` when the body returned but the lease had ended. Use each object for one ``with`` at a time.
    """

    def __init__(self, throttle: "Throttle", key: Any, limit: int, lease: Period, block: Optional[Period] = None,
                 *, id: Optional[Token] = None, renew: Renew = False, on_lost: Optional[OnLost] = None) -> None:
        super().__init__(key, limit, lease, block, id, renew, on_lost)
        self.throttle = throttle
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> Lease:
        token = self._token()
        try:
            decision = self.throttle.acquire(self.key, self.limit, self.lease_period, self.block, id=token)
        except BaseException as error:
            if _sent_maybe(error):
                try:
                    self.throttle.release(self.key, token)  # in case it was let in as the reply was lost
                except Exception:
                    pass  # the lease ends by itself at its end
            raise
        lease = self._admitted(decision)
        if self.every is not None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._renew_loop, args=(lease, self.every),
                                            name=f"redis-throttle renew {_text(self.key)}", daemon=True)
            self._thread.start()
        return lease

    def _renew_loop(self, lease: Lease, every: float) -> None:
        while not self._stop.wait(every):
            try:
                still_held = self.throttle.renew(self.key, lease.token, self.lease_period)
            except Exception as error:  # the connection, a failover: try again at the next interval
                lease.renew_error = error
                continue
            if not self._renewed(lease, still_held):
                if self.on_lost is not None:
                    self.on_lost(lease)  # what it raises goes to threading.excepthook
                return

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        lease, self.lease = self.lease, None
        if lease is None:
            return
        if self._thread is not None:
            self._stop.set()
            self._thread.join()  # no renewal in flight once the release is sent
            self._thread = None
        if lease.renewal_lost:
            self._released(lease, False, exc is not None)  # nothing to release
            return
        try:
            freed = self.throttle.release(self.key, lease.token)
        except Exception:
            if exc is None:
                raise
            return  # the body's exception goes on; the lease ends by itself at its end
        self._released(lease, freed, exc is not None)


class AsyncConcurrency(_Held):
    """``AsyncThrottle.concurrency()``: ``async with throttle.concurrency(key, limit, lease) as lease: ...``.

    As ``Concurrency``, with the renewals in an asyncio task. ``on_lost`` may be a function or a coroutine
    function. Cancelling a task blocked on enter closes its connection, and the server forgets the waiter.
    """

    def __init__(self, throttle: "AsyncThrottle", key: Any, limit: int, lease: Period,
                 block: Optional[Period] = None, *, id: Optional[Token] = None, renew: Renew = False,
                 on_lost: Optional[OnLost] = None) -> None:
        super().__init__(key, limit, lease, block, id, renew, on_lost)
        self.throttle = throttle
        self._stop: Optional[asyncio.Event] = None
        self._task: Optional["asyncio.Task[None]"] = None

    async def __aenter__(self) -> Lease:
        token = self._token()
        try:
            decision = await self.throttle.acquire(self.key, self.limit, self.lease_period, self.block, id=token)
        except BaseException as error:
            if _sent_maybe(error):
                try:
                    await self.throttle.release(self.key, token)  # in case it was let in as the reply was lost
                except Exception:
                    pass  # the lease ends by itself at its end
            raise
        lease = self._admitted(decision)
        if self.every is not None:
            self._stop = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(
                self._renew_loop(lease, self.every, self._stop), name=f"redis-throttle renew {_text(self.key)}")
        return lease

    async def _renew_loop(self, lease: Lease, every: float, stop: asyncio.Event) -> None:
        while True:
            try:
                await asyncio.wait_for(stop.wait(), every)
                return
            except asyncio.TimeoutError:
                pass
            try:
                still_held = await self.throttle.renew(self.key, lease.token, self.lease_period)
            except Exception as error:  # the connection, a failover: try again at the next interval
                lease.renew_error = error
                continue
            if not self._renewed(lease, still_held):
                if self.on_lost is not None:
                    try:
                        result = self.on_lost(lease)
                        if inspect.isawaitable(result):
                            await result
                    except Exception as error:
                        asyncio.get_running_loop().call_exception_handler(
                            {"message": "on_lost raised", "exception": error, "task": asyncio.current_task()})
                return

    async def __aexit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                        tb: Optional[TracebackType]) -> None:
        lease, self.lease = self.lease, None
        if lease is None:
            return
        if self._task is not None and self._stop is not None:
            self._stop.set()
            await _finish(self._task)  # no renewal in flight once the release is sent
            self._task = self._stop = None
        if lease.renewal_lost:
            self._released(lease, False, exc is not None)
            return
        try:
            freed = await self.throttle.release(self.key, lease.token)
        except Exception:
            if exc is None:
                raise
            return
        self._released(lease, freed, exc is not None)


async def _finish(task: "asyncio.Task[None]") -> None:
    """Awaits the renewal task; if the exit itself is cancelled meanwhile, cancels the task too."""
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        raise

