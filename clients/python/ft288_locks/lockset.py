"""Lock sets: several locks taken all or none (docs/design.md#lock-sets).

Each name of a set is a Lease of its own (its fencing token, its local
deadline, its thread that ends it at the deadline); the set renews all of
them with one request per renewal and releases them with one more.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from typing import Dict, List, NamedTuple, Optional, Protocol, Sequence

from ._defaults import DELIVERY_ALLOWANCE, RELEASE_RETRY_TIMEOUT
from ._model import Lock
from ._retry import Backoff, definitive, hint, maybe_granted, retryable
from .errors import HeldError, LeaseLostError, LeaseReleased, LockError, NotFoundError
from .lease import Lease, lease_margin, round_limit

log = logging.getLogger("ft288_locks")

MAX_SET_NAMES = 25
"""The most names one lock set may have (the service's bound)."""


class LockSetHeldError(HeldError):
    """A lock set refused because one of its names is held by another owner
    (or has waiters queued, or is in its lock-delay): nothing is held, but
    for ``unreleased``, names the set took and the service could not
    release, which lapse at their TTL. A HeldError whose ``resource`` is
    ``blocked_by``; ``free_at`` is when that name comes free by the
    service's clock (None when the service did not say)."""

    def __init__(self, blocked_by: str, free_at: Optional[_dt.datetime] = None, retry_after: Optional[float] = None,
                 unreleased: Sequence[str] = (), waited: float = 0.0) -> None:
        message = f"lock set refused: {blocked_by!r} is held by another owner"
        if unreleased:
            message += f" (held until their TTL: {list(unreleased)!r})"
        if waited > 0:
            message += f"; gave up after waiting {waited:.3g} s"
        super().__init__(blocked_by, free_at, retry_after, waited, message)
        self.blocked_by = blocked_by
        self.free_at = free_at
        self.unreleased = list(unreleased)


class LockSetError(LockError):
    """A lock set's renewal or release that failed for some names:
    ``failed`` maps each to its error (the ProblemError the service answered
    for it, or why the request failed)."""

    def __init__(self, operation: str, failed: Dict[str, BaseException]) -> None:
        self.operation = operation
        self.failed = failed
        super().__init__(f"{operation} lock set: " + "; ".join(f"{n!r}: {e}" for n, e in failed.items()))


class SetItem(NamedTuple):
    """One name's outcome of a set's renewal or release."""

    resource: str
    ok: bool
    lock: Optional[Lock]
    error: Optional[LockError]


class SetHost(Protocol):
    """What a set needs of its client (Client is one)."""

    timeout: float
    backoff: Backoff
    lease_margin: Optional[float]

    def _renew_set(self, prefix: str, owner: str, ttl: int, leases: Sequence[Lease], timeout: float) -> List[SetItem]: ...

    def _release_set(self, prefix: str, owner: str, leases: Sequence[Lease], timeout: float) -> List[SetItem]: ...


class LockSet:
    """A lock set held by this client; made by Client.try_acquire_set,
    acquire_set and lock_set.

    ``leases`` are its names' leases in name order (byte order), each with
    its own ``fencing_token``: send each name's token with every write to
    what that name protects. A thread renews every lease with one request
    every ttl/3, timed from the request of the grant or latest renewal,
    retrying temporary failures until the earliest local deadline (unless
    made with ``keepalive=False``). The set is lost as soon as any of its
    leases is: a renewal refused for one name, or the earliest local
    deadline passed by the monotonic clock. ``check()``, ``held`` and
    ``reason`` read the clock when asked, as a lease's do: call
    ``check()`` before each step that touches the protected resources.
    A context manager that releases the set.
    """

    def __init__(self, client: SetHost, prefix: str, set_id: str, owner: str, ttl: int,
                 leases: List[Lease], keepalive: bool = True) -> None:
        self._client = client
        self._prefix = prefix
        self._id = set_id
        self._owner = owner
        self._ttl = ttl
        self._leases = leases
        self._keepalive = keepalive
        margin = lease_margin(ttl, client.lease_margin)
        self._interval = min(ttl / 3, round_limit(ttl, margin))
        self._release_mu = threading.Lock()
        self._released = False
        self._release_unknown = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        if keepalive:
            self._thread = threading.Thread(target=self._run, name=f"ft288-locks-set:{prefix}", daemon=True)
            self._thread.start()

    @property
    def id(self) -> str:
        """The set's id; the admin listing shows it on each of its leases."""
        return self._id

    @property
    def prefix(self) -> str:
        """The path prefix every name begins with (``/locksets/{prefix}``)."""
        return self._prefix

    @property
    def owner(self) -> str:
        """The owner the set is held for."""
        return self._owner

    @property
    def ttl(self) -> int:
        """The leases' time-to-live in seconds; every renewal restarts it."""
        return self._ttl

    @property
    def leases(self) -> List[Lease]:
        """The set's leases in name order."""
        return list(self._leases)

    @property
    def names(self) -> List[str]:
        """The set's names in name order."""
        return [l.resource for l in self._leases]

    def lease(self, name: str) -> Lease:
        """The set's lease on ``name``; KeyError when it is not in the set."""
        for l in self._leases:
            if l.resource == name:
                return l
        raise KeyError(name)

    @property
    def held(self) -> bool:
        """Whether every lease of the set is held, by the clock now."""
        return all(l.held for l in self._leases)

    @property
    def reason(self) -> Optional[BaseException]:
        """Why the first lost lease was lost (by the clock now); None while
        every lease is held (or after a release)."""
        for l in self._leases:
            r = l.reason
            if r is not None:
                return r
        return None

    @property
    def deadline(self) -> float:
        """The earliest local deadline of the set's leases (time.monotonic())."""
        return min(l.deadline for l in self._leases)

    def check(self) -> None:
        """Raises the first lost lease's LeaseLostError (also when a local
        deadline has just passed by the clock now), LeaseReleased after
        release(). Call it before each step."""
        for l in self._leases:
            l.check()

    def __repr__(self) -> str:
        return f"LockSet(id={self._id!r}, names={self.names!r}, owner={self._owner!r}, held={self.held})"

    # -- renewing --------------------------------------------------------------

    def renew(self) -> None:
        """Renews every lease of the set by its TTL with one request. A name
        the service refused for good (NotFoundError, ForbiddenError,
        StaleTokenError) loses its lease, and so the set; a temporary failure
        leaves the leases held until their local deadlines. Raises
        LockSetError naming the names that failed, or the request's error."""
        self._renew(self._client.timeout)

    def _renew(self, timeout: float) -> None:
        self.check()
        sent = time.monotonic()
        try:
            items = self._client._renew_set(self._prefix, self._owner, self._ttl, self._leases, timeout)
        except LockError as e:
            if definitive(e) or not retryable(e):
                for l in self._leases:
                    l._lose(e)
            raise
        failed: Dict[str, BaseException] = {}
        for it in items:
            try:
                l = self.lease(it.resource)
            except KeyError:
                continue
            if it.ok and it.lock is not None:
                l._extend(sent, it.lock)
                if l.reason is not None:
                    failed[it.resource] = l.reason
                continue
            err = it.error or LockError(f"{it.resource!r}: malformed lock set answer")
            failed[it.resource] = err
            if definitive(err) or not retryable(err):
                l._lose(err)
        if failed:
            raise LockSetError("renew", failed)

    def _run(self) -> None:
        """The set's keep-alive thread: a renewal every interval, retried
        with short backoff until DELIVERY_ALLOWANCE before the earliest
        local deadline (each lease's own thread ends it then)."""
        c = self._client
        b = Backoff(c.backoff.base, max(c.backoff.base, min(c.backoff.max, self._ttl / 8)))
        while not self._stop.is_set():
            renewed_at = min(l._renewed_at for l in self._leases)
            if self._stop.wait(max(renewed_at + self._interval - time.monotonic(), 0.0)):
                return
            attempt = 0
            while True:
                if self._stop.is_set() or not self.held:
                    return
                deadline = self.deadline - DELIVERY_ALLOWANCE
                now = time.monotonic()
                if now >= deadline:
                    return
                try:
                    self._renew(min(c.timeout, self._interval, deadline - now))
                    break
                except (LeaseLostError, LeaseReleased):
                    return
                except Exception as e:  # temporary: retry until the deadline
                    log.debug("renewing lock set %r failed, retrying: %s", self.names, e)
                if self._stop.wait(max(min(b.delay(attempt), deadline - time.monotonic()), 0.0)):
                    return
                attempt += 1

    # -- releasing -------------------------------------------------------------

    def release(self, timeout: Optional[float] = None) -> None:
        """Stops the keep-alive, ends every lease of the set (``check()``
        raises LeaseReleased) and releases every name with one request, by
        owner and fencing token, retrying temporary failures of the names not
        yet released for up to ``timeout`` seconds (default
        RELEASE_RETRY_TIMEOUT), and not past the leases' end by the local
        clock; a NotFoundError after an attempt whose outcome is unknown
        counts as released. Raises LockSetError naming the names not
        released: they lapse at their TTL. Calls after the first do
        nothing."""
        with self._release_mu:
            if self._released:
                return
            self._released = True
            self._stop.set()
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join()
            lease_end = max(l.deadline + l._margin for l in self._leases)
            for l in self._leases:
                l._end_released()
            c = self._client
            give_up = time.monotonic() + (RELEASE_RETRY_TIMEOUT if timeout is None else timeout)
            remaining = list(self._leases)
            failed: Dict[str, BaseException] = {}
            attempt = 0
            while remaining:
                temp: Optional[BaseException] = None
                try:
                    items = c._release_set(self._prefix, self._owner, remaining,
                                           max(min(c.timeout, give_up - time.monotonic()), 0.001))
                    again = []
                    for it in items:
                        if it.ok:
                            continue
                        err = it.error or LockError(f"{it.resource!r}: malformed lock set answer")
                        if isinstance(err, NotFoundError) and self._release_unknown and not err.force_released:
                            continue  # an earlier attempt may have released it
                        if retryable(err) and not definitive(err):
                            again.append(self.lease(it.resource))
                            temp = err
                        else:
                            failed[it.resource] = err
                    remaining = again
                except LockError as e:
                    if not retryable(e):
                        for l in remaining:
                            failed[l.resource] = e
                        break
                    if maybe_granted(e):
                        self._release_unknown = True
                    temp = e
                if not remaining:
                    break
                delay = c.backoff.delay(attempt, hint(temp))
                attempt += 1
                if time.monotonic() + delay > min(give_up, lease_end):
                    for l in remaining:
                        failed[l.resource] = temp  # type: ignore[assignment]
                    break
                time.sleep(delay)
            if failed:
                raise LockSetError("release", failed)

    def __enter__(self) -> "LockSet":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        """Releases the set. With no exception in flight, raises the first
        lost lease's LeaseLostError if any lease of the set was lost before
        the release (a release refused for a name as gone counts: that name
        had ended at the service); an exception in flight propagates as is.
        A release that keeps failing temporarily is logged, not raised."""
        # By the clock now: a block that ran past the deadline ran partly unprotected.
        lost = next(((l, l.reason) for l in self._leases if l.reason is not None), None)
        try:
            self.release()
        except LockSetError as e:
            if lost is None:
                lost = next(((self.lease(n), err) for n, err in e.failed.items() if definitive(err)), None)
            if not all(definitive(err) for err in e.failed.values()):  # a definitive refusal is reported as the loss
                log.warning("releasing lock set %r failed: %s", self.names, e)
        if exc_type is None and lost is not None:
            lease, why = lost
            raise LeaseLostError(lease.resource, lease.fencing_token, why) from why
        return False
