"""A lease held by this client, with its keep-alive thread."""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from typing import Callable, Optional, Protocol

from ._defaults import DELIVERY_ALLOWANCE, RELEASE_RETRY_TIMEOUT
from ._model import Lock, PermitInfo
from ._retry import Backoff, definitive, hint, maybe_granted, retryable
from .errors import LeaseExpired, LeaseLostError, LeaseReleased, LockError, NotFoundError

log = logging.getLogger("ft288_locks")


class LeaseHost(Protocol):
    """What a lease needs of its client (Client is one): the settings its
    renewals and release use, and the two calls. The lease module knows no
    more of the client than this."""

    timeout: float
    backoff: Backoff
    lease_margin: Optional[float]

    def _renew(self, resource: str, owner: str, ttl: int, token: Optional[int], timeout: float) -> Lock: ...

    def _release(self, resource: str, owner: str, token: Optional[int], timeout: float) -> None: ...


def lease_margin(ttl: float, option: Optional[float]) -> float:
    """The margin of a lease of ``ttl``: ``option`` unless it is not below the
    TTL, else ``min(ttl/10, 1 s)``."""
    if option is None or option >= ttl:
        return min(ttl / 10, 1.0)
    return option


def round_limit(ttl: float, margin: float) -> float:
    """The longest a lease of ``ttl`` and ``margin`` may wait at the service in
    one round, in seconds: two thirds of its local validity (ttl − margin).
    The local deadline counts from before the request and the grant may come
    at the end of the round: this leaves a third of the validity for the
    first renewal. It also caps the keep-alive's interval."""
    return (ttl - margin) * 2 / 3


class _LostEvent(threading.Event):
    """A lease's ``lost``: is_set() and wait() first end the lease if its
    local deadline has passed by the clock now, as Lease.held does, so a
    process resumed from a pause sees the loss before the lease's thread
    has run."""

    def __init__(self, expire_if_due: Callable[[], None]) -> None:
        super().__init__()
        self._expire_if_due = expire_if_due

    def is_set(self) -> bool:
        self._expire_if_due()
        return super().is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        if super().wait(timeout):
            return True
        return self.is_set()


class Lease:
    """A lock held by this client; made by Client.try_acquire/acquire/lock.

    Its local deadline is measured on ``time.monotonic()`` from before the
    request that granted or last renewed it was sent: ``t0 + ttl - margin``,
    margin ``min(ttl/10, 1 s)`` unless the client sets ``lease_margin``. The
    service's clock never decides whether the client believes it holds the
    lock.

    A daemon thread starts with the lease. It renews the lease every ttl/3
    (every ⅔ × (ttl − margin) when that is shorter: a margin over ttl/2),
    timed from the request that granted or last renewed it — at once when
    that time has passed, as after a grant late in a wait at the service —
    retrying temporary failures with short backoff until the deadline,
    unless the lease was made with ``keepalive=False``, and in either case
    ends the lease and sets ``lost`` DELIVERY_ALLOWANCE (5 ms) before the
    local deadline when no renewal succeeded, so that ``lost``'s waiters
    wake before it. A refused renewal (NotFoundError, ForbiddenError,
    StaleTokenError, or another answer renewing cannot get past) ends it at
    once. release() stops the thread and waits for it.

    Every question reads the clock: ``check()`` (raises LeaseLostError with
    the reason), ``held``, ``reason`` and ``lost.is_set()``/``lost.wait()``
    end the lease at the moment they are asked if its local deadline has
    passed, so a process resumed from a pause learns of the loss at its
    first question, before the thread has run. Call ``check()`` before each
    step that touches the protected resource. A Lease is safe for use from
    several threads and is a context manager that releases it (see
    Client.lock).
    """

    _slot: Optional[int] = None  # a Permit's (or a reader's) slot, for its LeaseLostError
    _mode: Optional[str] = None  # a read/write lock's lease's mode, for its LeaseLostError

    def __init__(self, client: LeaseHost, lock: Lock, ttl: int, t0: float, keepalive: bool = True) -> None:
        self._client = client
        self._resource = lock.resource
        self._owner = lock.owner
        self._token = lock.fencing_token
        self._ttl = ttl
        margin = lease_margin(ttl, client.lease_margin)
        self._margin = margin
        self._keepalive = keepalive
        self._interval = min(ttl / 3, round_limit(ttl, margin))

        self.lost: threading.Event = _LostEvent(self._expire_if_due)
        """Set when the lease is lost: a renewal or the release was refused, or
        the local deadline passed without a successful renewal. Its
        is_set() and wait() read the clock, as ``held`` does."""

        self._mu = threading.Lock()
        self._release_mu = threading.Lock()
        self._lock = lock  # the service's latest view
        self._deadline = t0 + ttl - margin
        self._renewed_at = t0  # when the request of the grant or latest renewal was sent
        self._reason: Optional[BaseException] = None
        self._ended = False  # lost or released: nothing may extend the lease
        self._released = False  # release() was called
        self._release_done = False  # the service confirmed it (or an earlier attempt may have)
        self._release_unknown = False  # a release attempt got no definite answer
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(t0,), name=f"ft288-locks-lease:{lock.resource}", daemon=True
        )
        self._thread.start()

    # -- what the lease is ---------------------------------------------------

    @property
    def resource(self) -> str:
        """The lock's name."""
        return self._resource

    @property
    def owner(self) -> str:
        """The owner the lease is held for, as the service stored it."""
        return self._owner

    @property
    def fencing_token(self) -> int:
        """The lease's fencing token. Send it with every write to a system the
        lock protects; the system rejects tokens smaller than the largest it
        has seen."""
        return self._token

    @property
    def ttl(self) -> int:
        """The lease's time-to-live in seconds; every renewal restarts it."""
        return self._ttl

    @property
    def keepalive(self) -> bool:
        """Whether the lease's thread renews it."""
        return self._keepalive

    @property
    def lock(self) -> Lock:
        """The lease as the service last reported it (grant or latest renewal)."""
        with self._mu:
            return self._lock

    @property
    def expires_at(self) -> _dt.datetime:
        """When the lease ends by the service's clock, as of the latest grant or
        renewal. Informational: use held, check() or lost to decide."""
        return self.lock.expires_at

    @property
    def deadline(self) -> float:
        """The local deadline on the time.monotonic() clock."""
        with self._mu:
            return self._deadline

    @property
    def remaining(self) -> float:
        """Seconds until the local deadline (negative once past)."""
        return self.deadline - time.monotonic()

    @property
    def held(self) -> bool:
        """Whether the lease is neither lost nor released and its local deadline
        has not passed, by the clock now (past it, this ends the lease)."""
        self._expire_if_due()
        with self._mu:
            return not self._ended

    @property
    def reason(self) -> Optional[BaseException]:
        """Why the lease was lost (by the clock now, as ``held``); None while
        it is not."""
        self._expire_if_due()
        with self._mu:
            return self._reason

    def check(self) -> None:
        """Raises LeaseLostError (its ``reason`` says why) if the lease is lost,
        including when its local deadline has just passed by the clock now,
        and LeaseReleased after release(). Call it before each step that
        touches the protected resource."""
        self._expire_if_due()
        self._raise_if_ended()

    def _expire_if_due(self) -> None:
        """Ends the lease if its local deadline has passed by the clock now:
        the one judgement behind every question."""
        with self._mu:
            expired = not self._ended and time.monotonic() >= self._deadline
        if expired:
            self._lose(LeaseExpired())

    def __repr__(self) -> str:
        return (
            f"Lease(resource={self._resource!r}, owner={self._owner!r}, "
            f"fencing_token={self._token}, held={self.held})"
        )

    # -- renewing --------------------------------------------------------------

    def renew(self) -> None:
        """Extends the lease by its TTL once. A refusal that means the lease is
        gone (NotFoundError, ForbiddenError, StaleTokenError, or another
        answer renewing cannot get past) loses the lease and raises
        LeaseLostError. A temporary
        failure (5xx, no answer) raises that error; the lease stays held until
        its local deadline."""
        self._renew(self._client.timeout)

    def _renew(self, timeout: float) -> None:
        self.check()
        sent = time.monotonic()
        try:
            lock = self._client._renew(self._resource, self._owner, self._ttl, self._token, timeout)
        except LockError as e:
            if definitive(e) or not retryable(e):
                self._lose(e)
                self._raise_if_ended(e)
            raise
        self._extend(sent, lock)
        self._raise_if_ended()

    def _extend(self, sent: float, lock: Lock) -> None:
        """Records a renewal sent at ``sent`` (monotonic); one that came
        after the local deadline loses the lease instead (it may have lapsed
        before the renewal reached the service). A lock set's renewal calls
        it for each of its leases."""
        with self._mu:
            if not self._ended and time.monotonic() >= self._deadline:
                late = True
            else:
                late = False
                if not self._ended:
                    self._lock = lock
                    if sent + self._ttl - self._margin > self._deadline:
                        self._deadline = sent + self._ttl - self._margin
                        self._renewed_at = sent
        if late:
            self._lose(LeaseExpired())

    def _raise_if_ended(self, cause: Optional[BaseException] = None) -> None:
        with self._mu:
            ended, reason, released = self._ended, self._reason, self._released
        if reason is not None:
            raise LeaseLostError(self._resource, self._token, reason, self._slot, self._mode) from (cause or reason)
        if released:
            raise LeaseReleased(f"lease on {self._resource!r} (fencing token {self._token}) was released")
        assert not ended

    def _lose(self, reason: BaseException) -> None:
        """Ends the lease for reason unless it has ended already."""
        with self._mu:
            if self._ended:
                return
            self._ended = True
            self._reason = reason
            # Under the lock, so no thread sees the lease ended (held False)
            # while lost is not yet set: is_set() waits for _mu.
            self.lost.set()
        self._stop.set()

    def _run(self, t0: float) -> None:
        """The lease's thread: renewals (with keep-alive) and the deadline,
        which it acts on DELIVERY_ALLOWANCE early."""
        next_renewal = t0 + self._interval
        while not self._stop.is_set():
            with self._mu:
                if self._ended:
                    return
                wake = self._deadline - DELIVERY_ALLOWANCE
            now = time.monotonic()
            if now >= wake:
                self._lose(LeaseExpired())
                return
            until = min(next_renewal, wake) if self._keepalive else wake
            if self._stop.wait(until - now):
                return
            if self._keepalive and time.monotonic() >= next_renewal:
                sent = self._renew_until_deadline()
                if sent is not None:
                    next_renewal = sent + self._interval

    def _renew_until_deadline(self) -> Optional[float]:
        """Renews, retrying temporary failures with short backoff until
        DELIVERY_ALLOWANCE before the local deadline, when the thread must
        end the lease. Returns when the successful request was sent, or None
        when the lease ended, release() was called or that time passed."""
        c = self._client
        b = Backoff(c.backoff.base, max(c.backoff.base, min(c.backoff.max, self._ttl / 8)))
        attempt = 0
        while not self._stop.is_set():
            with self._mu:
                if self._ended:
                    return None
                deadline = self._deadline - DELIVERY_ALLOWANCE
            sent = time.monotonic()
            if sent >= deadline:
                return None
            try:
                self._renew(min(c.timeout, self._interval, deadline - sent))
                return sent
            except (LeaseLostError, LeaseReleased):
                return None
            except Exception as e:  # temporary: retry until the deadline
                log.debug("renewing lease on %r failed, retrying: %s", self._resource, e)
            delay = min(b.delay(attempt), deadline - time.monotonic())
            attempt += 1
            if self._stop.wait(max(delay, 0.0)):
                return None
        return None

    # -- releasing -------------------------------------------------------------

    def release(self, timeout: Optional[float] = None) -> None:
        """Stops the lease's thread (waiting for it) and ends the lease at the
        service, sending its fencing token so that a newer lease of the same
        owner is left alone.

        Temporary failures (503, API Gateway's throttle answers, no answer)
        are retried with backoff for up to ``timeout`` seconds (default
        RELEASE_RETRY_TIMEOUT), and not past the lease's end by the local
        clock (its TTL after the request of the grant or latest renewal).
        Raises NotFoundError (the lease had expired, or was force released:
        ``force_released``), ForbiddenError or StaleTokenError (another lease
        replaced it) and then also sets ``lost`` with that reason, unless it was set
        already: the lease ended before the release. After an attempt whose
        outcome is unknown (a 5xx, no answer), a later one that finds no live
        lease returns quietly, since the earlier attempt may have been the
        one that released it (unless the service says an operator force
        released it). When the retries run out the last failure is raised;
        release() may be called again. Calls after a successful release do
        nothing."""
        with self._release_mu:  # one release at a time
            with self._mu:
                if self._release_done:
                    return
                lease_end = self._deadline + self._margin  # retrying past it is pointless
            self._end_released()
            c = self._client
            give_up = time.monotonic() + (RELEASE_RETRY_TIMEOUT if timeout is None else timeout)
            attempt = 0
            while True:
                try:
                    c._release(self._resource, self._owner, self._token,
                               max(min(c.timeout, give_up - time.monotonic()), 0.001))
                    break
                except LockError as e:
                    if definitive(e):
                        with self._mu:
                            self._release_done = True
                            if self._release_unknown and not (isinstance(e, NotFoundError) and e.force_released):
                                return
                            if self._reason is None:
                                self._reason = e
                        self.lost.set()
                        raise
                    if not retryable(e):
                        raise
                    if maybe_granted(e):  # it may have been applied
                        with self._mu:
                            self._release_unknown = True
                    delay = c.backoff.delay(attempt, hint(e))
                    attempt += 1
                    if time.monotonic() + delay > min(give_up, lease_end):
                        raise
                    time.sleep(delay)
            with self._mu:
                self._release_done = True

    def _end_released(self) -> None:
        """Ends the lease as released (``check()`` raises LeaseReleased) and
        stops its thread, waiting for it; the lease's release() and a lock
        set's call it before telling the service."""
        with self._mu:
            self._ended = True
            self._released = True
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        """Releases the lease (release() retries temporary failures). With no
        exception in flight, raises LeaseLostError if the lease was lost at any
        point before the release; an exception in flight propagates as is.
        A release that keeps failing is logged, not raised (the lease runs
        out by itself)."""
        self._expire_if_due()  # a block that ran past the deadline ran partly unprotected
        try:
            self.release()
        except LockError as e:
            if not definitive(e):  # a definitive refusal is recorded as the reason
                log.warning("releasing lease on %r failed: %s", self._resource, e)
        if exc_type is None:
            reason = self.reason
            if reason is not None:
                raise LeaseLostError(self._resource, self._token, reason, self._slot, self._mode) from reason
        return False


class _PermitHost:
    """A permit's LeaseHost: its client's settings, and the renew and release
    of the permit's slot."""

    def __init__(self, client: "PermitHost", slot: int) -> None:
        self._client = client
        self._slot = slot

    @property
    def timeout(self) -> float:
        return self._client.timeout

    @property
    def backoff(self) -> Backoff:
        return self._client.backoff

    @property
    def lease_margin(self) -> Optional[float]:
        return self._client.lease_margin

    def _renew(self, resource: str, owner: str, ttl: int, token: Optional[int], timeout: float) -> Lock:
        return self._client._renew_permit(resource, owner, self._slot, ttl, token, timeout)._as_lock()

    def _release(self, resource: str, owner: str, token: Optional[int], timeout: float) -> None:
        self._client._release_permit(resource, owner, self._slot, token, timeout)


class PermitHost(Protocol):
    """What a permit needs of its client (Client is one)."""

    timeout: float
    backoff: Backoff
    lease_margin: Optional[float]

    def _renew_permit(self, name: str, owner: str, slot: int, ttl: int, token: Optional[int], timeout: float) -> PermitInfo: ...

    def _release_permit(self, name: str, owner: str, slot: int, token: Optional[int], timeout: float) -> None: ...


class Permit(Lease):
    """A permit of a semaphore held by this client; made by
    Client.try_acquire_semaphore/acquire_semaphore/semaphore.

    A Lease (keep-alive thread, ``lost``, ``check()``, ``release()``, a
    context manager) in a slot of its own, renewed and released by slot.
    ``resource`` and ``name`` are the semaphore's name. Its fencing token is
    larger than every token of the semaphore before it, so a protected
    resource fences per slot: it keeps the largest token seen for each slot
    (``fence_<slot>``) and refuses a smaller one, which a permit that lost
    its slot has; one "largest token" would refuse the other live permits.
    """

    def __init__(self, client: PermitHost, info: PermitInfo, permits: int, ttl: int, t0: float, keepalive: bool = True) -> None:
        self._slot = info.slot
        self._permits = permits
        super().__init__(_PermitHost(client, info.slot), info._as_lock(), ttl, t0, keepalive)

    @property
    def name(self) -> str:
        """The semaphore's name (as ``resource``)."""
        return self.resource

    @property
    def slot(self) -> int:
        """The permit's slot, 0 to ``permits`` − 1."""
        return self._slot  # type: ignore[return-value]

    @property
    def permits(self) -> int:
        """The semaphore's number of permits, as acquired."""
        return self._permits

    @property
    def info(self) -> PermitInfo:
        """The permit as the service last reported it (grant or latest renewal)."""
        lock = self.lock
        return PermitInfo(lock.resource, self.slot, lock.owner, lock.fencing_token, lock.acquired_at,
                          lock.expires_at, lock.lock_delay_seconds)

    def __repr__(self) -> str:
        return (
            f"Permit(name={self.name!r}, slot={self.slot}, owner={self.owner!r}, "
            f"fencing_token={self.fencing_token}, held={self.held})"
        )
