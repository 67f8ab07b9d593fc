"""The lock service client: acquiring, the low-level calls, and HTTP."""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import socket
import threading
import time
import urllib.error
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from ._admin import AdminCalls
from ._args import (
    base_url,
    check_index,
    check_lock_delay,
    check_resource,
    check_token,
    check_ttl,
    check_wait,
    check_watch_wait,
    env_flag,
    check_permits,
    check_slot,
    escape,
    lock_path,
    owner_or_default,
    rw_path,
    semaphore_path,
)
from ._defaults import (
    DEFAULT_ACQUIRE_WAIT,
    DEFAULT_BACKOFF,
    DEFAULT_ENDPOINT,
    DEFAULT_TIMEOUT,
    DEFAULT_TTL,
    DEFAULT_USER_AGENT,
    MAX_SERVER_WAIT,
)
from ._http import NotSent, PooledTransport, Response, Transport, parse_retry_after, parse_time
from ._model import (
    AdminLock,
    AdminPermit,
    Lock,
    PermitInfo,
    SemaphoreStatus,
    SemaphoreWatchResult,
    WatchResult,
    parse_lock,
    parse_permit,
    parse_semaphore,
    parse_watch,
)
from ._retry import Backoff, hint, maybe_granted, retryable
from .rwlock import (
    AdminRWLease,
    RWLease,
    RWLeaseInfo,
    RWStatus,
    RWWatchResult,
    check_mode,
    parse_rw_lease,
    parse_rw_status,
    parse_rw_watch,
)
from .errors import (
    AcquireTimeout,
    InvalidRequest,
    FullError,
    HeldError,
    LockError,
    TransportError,
    ValidationError,
    attach_queue_ticket,
    no_wait_route,
    problem_from_answer,
)
from .election import Election
from .lease import Lease, Permit, lease_margin, round_limit
from .lockset import MAX_SET_NAMES, LockSet, LockSetHeldError, SetItem

# A server-side wait ends this long before acquire's own deadline, so that a
# grant at the very end of it still arrives in time.
_SERVER_WAIT_SLACK = 0.25
# How long after acquire's deadline the answer of the request in flight is
# still awaited: a grant that comes late is then released with its token.
_LATE_ANSWER_GRACE = 1.0
# Bounds the clean-up release of a grant nobody will use, its retries
# included: it runs before acquire() returns.
_CLEANUP_TIMEOUT = 5.0

Number = Union[int, float]


class _NoServerWait(Exception):
    """The service rejected wait_seconds: it predates server-side waiting."""


class _NoWaitRoute(Exception):
    """The stack has no waiting route (API Gateway's 404 on …/wait): it
    predates the split of try and waiting acquires."""


class Client(AdminCalls):
    """A client of one lock service. Safe for use from several threads; build
    one per process and share it: its requests, and its leases' renewals,
    reuse a few keep-alive connections.

    ``endpoint`` is the API's base URL, e.g. ``http://127.0.0.1:8080`` or
    ``https://abc123.execute-api.eu-west-1.amazonaws.com``;
    ``Client.from_env()`` takes it (and signing) from the environment. Options:

    - ``timeout``: seconds one HTTP exchange may take (default 30).
    - ``backoff``: ``(base, max)`` seconds of the retry delays of acquire() and
      of renewals (default ``(0.05, 2.0)``); Retry-After is honoured up to max.
    - ``lease_margin``: how long before the end of its TTL, counted from
      before the request that granted or renewed it, a lease is given up when
      no renewal succeeded. Default (and when not below the TTL):
      ``min(ttl/10, 1 s)``.
    - ``sigv4``: sign every request with AWS SigV4 for ``execute-api``, as an
      IAM-authorised API Gateway requires. Needs botocore (SigV4Unavailable
      otherwise). ``region`` and ``credentials`` (a botocore credentials
      object) default to botocore's default chain (AWS_REGION, profiles, SSO,
      container and instance roles).
    - ``server_wait``: let acquire() ask the service to hold the request while
      the lock is taken (``wait_seconds``), falling back to polling when the
      service predates it. False: always poll.
    - ``transport``: a callable ``(method, url, headers, body, timeout) ->
      Response`` that replaces the default PooledTransport (tests, custom
      HTTP stacks, ``PooledTransport(max_idle=...)``).

    The constructor does not touch the network (with ``sigv4`` it may read
    AWS configuration files). ``close()`` (or ``with Client(...) as c:``)
    closes the idle connections.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        backoff: Tuple[float, float] = DEFAULT_BACKOFF,
        lease_margin: Optional[float] = None,
        sigv4: bool = False,
        region: Optional[str] = None,
        credentials: Any = None,
        user_agent: str = DEFAULT_USER_AGENT,
        server_wait: bool = True,
        transport: Optional[Transport] = None,
    ) -> None:
        self.endpoint = base_url(endpoint)
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout {timeout!r}: want a positive number of seconds")
        if lease_margin is not None and not lease_margin > 0:
            raise ValueError(f"lease_margin {lease_margin!r}: want a positive number of seconds")
        self.timeout = float(timeout)
        self.backoff = Backoff(*backoff)
        self.lease_margin = lease_margin
        self.user_agent = user_agent
        self._server_wait = server_wait
        self.server_wait_supported: Optional[bool] = None
        """Whether the service holds waiting acquires; None until known."""
        self._semaphore_server_wait: Optional[bool] = None  # the same for semaphores
        self._set_server_wait: Optional[bool] = None  # the same for lock sets
        self._rw_server_wait: Optional[bool] = None  # the same for read/write locks
        # The stack predates the waiting routes (its …/wait answered API
        # Gateway's 404): waiting rounds go to the try route with
        # wait_seconds, as before the split.
        self._try_route_waits = False
        self._transport: Transport = transport or PooledTransport()
        self._cleanups = 0  # clean-up releases running, for drain()
        self._cleanups_done = threading.Condition()
        self._signer = None
        if sigv4:
            from ._sigv4 import SigV4

            self._signer = SigV4(region, credentials)
        elif region is not None or credentials is not None:
            raise ValueError("region and credentials are for signing: pass sigv4=True too")

    @classmethod
    def from_env(cls, **kwargs: Any) -> "Client":
        """A client configured by the environment, as the Go and TypeScript
        clients and lockctl are: the endpoint is ``LOCKS_ENDPOINT`` (default
        ``http://127.0.0.1:8080``, what ``make run`` serves); ``LOCKS_SIGV4``
        set to 1/true/yes/on signs requests with SigV4 (0/false/no/off or
        unset: no; anything else is a ValueError), for the region
        ``AWS_REGION`` (else botocore's configuration) with credentials from
        the default chain. Keyword arguments are the constructor's and win
        over the environment: ``Client.from_env(timeout=5)``."""
        endpoint = kwargs.pop("endpoint", None) or os.environ.get("LOCKS_ENDPOINT") or DEFAULT_ENDPOINT
        if "sigv4" not in kwargs:
            kwargs["sigv4"] = env_flag("LOCKS_SIGV4")
        if kwargs["sigv4"] and kwargs.get("region") is None and os.environ.get("AWS_REGION"):
            kwargs["region"] = os.environ["AWS_REGION"]
        return cls(endpoint, **kwargs)

    def close(self) -> None:
        """Closes the client's idle connections. The client stays usable (it
        opens new ones); leases keep renewing until they are released."""
        close = getattr(self._transport, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def drain(self, timeout: Optional[float] = None) -> bool:
        """Waits until no clean-up release runs: the release of a grant that
        came after its acquire stopped waiting, or of an acquire whose outcome
        stayed unknown. They run before acquire() returns, in its thread, so
        this matters only across threads (before the process exits, say).
        Returns False when ``timeout`` seconds (None: no limit) ran out first."""
        with self._cleanups_done:
            return self._cleanups_done.wait_for(lambda: self._cleanups == 0, timeout)

    @property
    def region(self) -> Optional[str]:
        """The region requests are signed for; None without signing."""
        return self._signer.region if self._signer else None

    def __repr__(self) -> str:
        return f"Client({self.endpoint!r}{', sigv4=True' if self._signer else ''})"

    # -- acquiring ---------------------------------------------------------

    def try_acquire(
        self,
        resource: str,
        *,
        ttl: Number = DEFAULT_TTL,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
    ) -> Lease:
        """Asks once for a lease of ``ttl`` whole seconds on ``resource``.

        Returns the Lease (its keep-alive thread already running unless
        ``keepalive=False``), or raises HeldError when another owner holds the
        lock. ``owner`` defaults to a new unique string. An owner that already
        holds the lock gets a new lease with a larger fencing token.

        ``lock_delay`` asks for a lock-delay of that many whole seconds (the
        service allows 0 to 300 by default): should the lease expire without
        a release, no other owner can take the lock until that long after its
        expiry, so a holder that is slow rather than dead cannot overlap the
        next one. A release frees the lock at once. The lease reports it in
        ``lease.lock.lock_delay_seconds``.

        When the outcome is unknown (no answer, a 5xx) and the owner is the
        generated default, the lease that request may have created is
        released before the error is raised, so it blocks nobody for a TTL.
        """
        return self._try_acquire(resource, 0, ttl, owner, keepalive, lock_delay)

    def _try_acquire(self, resource: str, permits: int, ttl: Number, owner: Optional[str], keepalive: bool,
                     lock_delay: Optional[Number], rw: Optional[str] = None) -> Lease:
        """try_acquire of a lock (permits 0), of a permit of the semaphore
        resource, or of a read/write lock's lease of mode rw."""
        resource, ttl = check_resource(resource), check_ttl(ttl)
        delay = check_lock_delay(lock_delay)
        owner, generated = owner_or_default(owner)
        try:
            return self._attempt(resource, owner, ttl, 0, None, keepalive, delay, permits=permits, rw=rw)
        except BaseException as e:
            if generated and maybe_granted(e):
                self._release_unheard(resource, owner, permits, rw)
            raise

    def acquire(
        self,
        resource: str,
        *,
        wait: Optional[Number] = DEFAULT_ACQUIRE_WAIT,
        ttl: Number = DEFAULT_TTL,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
    ) -> Lease:
        """Waits up to ``wait`` seconds (default DEFAULT_ACQUIRE_WAIT, 30;
        None: without limit) for a lease of ``ttl`` whole seconds on
        ``resource``.

        It tries first (``POST /locks/{resource}``: an uncontended acquire is
        that one request, never one on the waiting route). While the lock is
        taken, where the service supports it, the service itself holds the
        request (``POST /locks/{resource}/wait`` with ``wait_seconds``, up to 20 s a request, and
        at most ⅔ × (ttl − margin) whole seconds: the lease's local deadline
        counts from before the request, so a grant at the end of a round
        still leaves a third of it for the first renewal); otherwise, for the
        last fraction of a second, and when that bound is under a second, the
        client polls with jittered exponential backoff (``backoff``), waiting
        at least the service's Retry-After (capped at the backoff maximum, so
        an early release is noticed). Temporary failures (503, API Gateway's
        throttle answers 429 and 500 ``{"message"}``, other 5xx but the
        service's ``internal`` problem, no answer) are retried the same way;
        a repeated acquire of the same owner is safe. ``lock_delay`` is as
        for try_acquire.

        When ``wait`` runs out it raises HeldError (the lock stayed held) or
        the last attempt's error. The answer of a request in flight at that
        moment is awaited for up to a second more: a grant in it is released
        again (with its fencing token) and AcquireTimeout, a HeldError, is
        raised; a request whose outcome stays unknown is cleaned up by owner
        when the owner is the generated default. ``wait=0`` asks once,
        exactly like try_acquire.
        """
        return self._acquire(resource, 0, wait, ttl, owner, keepalive, lock_delay)

    def _acquire(self, resource: str, permits: int, wait: Optional[Number], ttl: Number, owner: Optional[str],
                 keepalive: bool, lock_delay: Optional[Number], rw: Optional[str] = None) -> Lease:
        """acquire of a lock (permits 0), of a permit of the semaphore
        resource, or of a read/write lock's lease of mode rw."""
        wait = check_wait(wait)
        if wait == 0:
            return self._try_acquire(resource, permits, ttl, owner, keepalive, lock_delay, rw)
        resource, ttl = check_resource(resource), check_ttl(ttl)
        delay = check_lock_delay(lock_delay)
        owner, generated = owner_or_default(owner)
        start = time.monotonic()
        give_up = None if wait is None or math.isinf(wait) else start + wait
        last: Optional[BaseException] = None
        attempt = 0
        ticket: Optional[str] = None  # the place in the lock's queue the last round answered
        # A try has found the lock held (the semaphore full). Until then every
        # attempt is a try on the quick route, so an uncontended acquire never
        # spends the waiting route's small throttle; from then on, rounds.
        held = False
        try:
            while True:
                ws = self._server_wait_seconds(give_up, ttl, permits, rw) if held else 0
                sent = time.monotonic()
                try:
                    return self._attempt(
                        resource, owner, ttl, ws, give_up, keepalive, delay, start, queue_ticket=ticket if ws else None,
                        permits=permits, rw=rw,
                    )
                except _NoWaitRoute:
                    # Read/write locks came with their waiting routes: a
                    # stack without them is polled.
                    if rw:
                        self._rw_server_wait = False
                    else:
                        self._try_route_waits = True
                    continue
                except _NoServerWait:
                    if rw:
                        self._rw_server_wait = False
                    elif permits:
                        self._semaphore_server_wait = False
                    else:
                        self.server_wait_supported = False
                    continue
                except AcquireTimeout:
                    raise
                except HeldError as e:
                    last = e
                    # The next round sends back the place this one was
                    # given (it lapses 2 s after this round's end).
                    ticket = getattr(e, "_queue_ticket", None)
                    if not held:
                        # The try found it held: wait at the service from now
                        # on, at once (the round wakes at the holder's
                        # release or expiry), or poll.
                        held = True
                        if self._server_wait_seconds(give_up, ttl, permits, rw) >= 1:
                            continue
                except LockError as e:
                    if not retryable(e):
                        raise
                    last = e
                    # A 503's place in the queue (its queue write may have
                    # landed): the next round reclaims it, as a held one's.
                    ticket = getattr(e, "_queue_ticket", None) or ticket
                now = time.monotonic()
                if give_up is not None and now >= give_up:
                    break
                if ws and isinstance(last, HeldError) and (now - sent >= 0.9 * ws or ticket):
                    continue  # the service waited, or keeps a place: ask again at once
                pause = self.backoff.delay(attempt, hint(last))
                attempt += 1
                if give_up is not None:
                    pause = min(pause, give_up - now)
                time.sleep(max(pause, 0.0))
                if give_up is not None and time.monotonic() >= give_up:
                    break
        except BaseException as e:
            # An interrupt, a bug, or a permanent answer. Only the first two
            # can have struck with a request in flight (a 4xx never grants).
            if generated and maybe_granted(e):
                self._release_unheard(resource, owner, permits, rw)
            raise
        if isinstance(last, FullError):
            raise FullError(resource, last.free_at, last.retry_after, waited=time.monotonic() - start) from None
        if isinstance(last, HeldError):
            raise HeldError(resource, last.expires_at, last.retry_after, waited=time.monotonic() - start) from None
        assert last is not None
        if generated and maybe_granted(last):
            self._release_unheard(resource, owner, permits, rw)
        raise last

    @contextlib.contextmanager
    def lock(
        self,
        resource: str,
        *,
        ttl: Number = DEFAULT_TTL,
        wait: Optional[Number] = DEFAULT_ACQUIRE_WAIT,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
    ) -> Iterator[Lease]:
        """``with client.lock("nightly-report") as lease: ...``

        Takes the lock as acquire() does (waiting up to ``wait`` seconds,
        default 30; ``wait=0`` asks once; HeldError when it stays taken),
        keeps the lease alive while the block runs, and always releases it
        when the block ends. If the block raised, its exception propagates
        unchanged. If it finished but the lease was lost meanwhile (a renewal
        was refused, the local deadline passed, or the release found the
        lease gone), LeaseLostError is raised on exit: the work ran at least
        partly without the lock.
        """
        lease = self.acquire(resource, wait=wait, ttl=ttl, owner=owner, keepalive=keepalive, lock_delay=lock_delay)
        with lease:
            yield lease

    def _server_wait_seconds(self, give_up: Optional[float], ttl: int, permits: int = 0, rw: Optional[str] = None) -> int:
        """The wait_seconds of the next request: at most MAX_SERVER_WAIT, the
        time left, and ⅔ × (ttl − margin), whole seconds; 0 (poll) when that
        is under a second, or when the service does not wait (for permits:
        a service may wait for locks and not yet for permits)."""
        supported = self._rw_server_wait if rw else self._semaphore_server_wait if permits else self.server_wait_supported
        if not self._server_wait or supported is False:
            return 0
        ws = min(MAX_SERVER_WAIT, int(round_limit(ttl, lease_margin(ttl, self.lease_margin))))
        if give_up is not None:
            ws = min(ws, int(give_up - time.monotonic() - _SERVER_WAIT_SLACK))
        return max(0, ws)

    def _attempt(
        self,
        resource: str,
        owner: str,
        ttl: int,
        wait_seconds: int,
        give_up: Optional[float],
        keepalive: bool,
        lock_delay: int = 0,
        start: Optional[float] = None,
        queue_ticket: Optional[str] = None,
        permits: int = 0,
        rw: Optional[str] = None,
    ) -> Lease:
        """One acquire request (of a permit of the semaphore resource when
        permits is not 0): a try to POST /locks/{resource}
        (/semaphores/{name}), or with wait_seconds a waiting round to its
        …/wait (to the try route on a stack without the waiting routes). A
        grant that arrives after give_up is released.
        A held answer of a waiting round carries its place in the lock's queue
        as the HeldError's (FullError's) ``_queue_ticket`` (None: no place)."""
        t0 = time.monotonic()  # before sending: the lease cannot have started earlier
        payload: Dict[str, Any] = {"owner": owner, "ttl_seconds": ttl}
        if permits:
            payload["permits"] = permits
        if wait_seconds:
            payload["wait_seconds"] = wait_seconds
        if lock_delay:
            payload["lock_delay_seconds"] = lock_delay
        if wait_seconds and queue_ticket:
            payload["queue_ticket"] = queue_ticket
        timeout = self.timeout + wait_seconds
        if give_up is not None:
            timeout = min(timeout, max(give_up - t0, 0.0) + _LATE_ANSWER_GRACE)
        what = f"acquire semaphore {resource!r}" if permits else f"acquire {resource!r}"
        path = semaphore_path(resource) if permits else lock_path(resource)
        if rw:
            what, path = f"acquire {rw} lock {resource!r}", rw_path(resource) + "/" + rw
        # Read/write locks came with their waiting routes: never the try
        # route with wait_seconds.
        wait_route = bool(wait_seconds) and (not self._try_route_waits or rw is not None)
        if wait_route:
            path += "/wait"
        try:
            resp, doc = self._send("POST", path, payload, timeout, what)
        except LockError as e:
            if wait_route and no_wait_route(e):
                raise _NoWaitRoute() from e
            if not isinstance(e, ValidationError):
                raise
            if wait_seconds and any(f.field == "wait_seconds" for f in e.errors):
                raise _NoServerWait() from e
            raise
        if not isinstance(doc, dict) or not isinstance(doc.get("acquired"), bool):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        if wait_seconds and rw:
            self._rw_server_wait = True
        elif wait_seconds and permits:
            self._semaphore_server_wait = True
        elif wait_seconds:
            self.server_wait_supported = True
        if not doc["acquired"]:
            retry_after = parse_retry_after(resp.headers.get("retry-after"))
            if permits:
                held: HeldError = FullError(resource, parse_time(doc.get("free_at")), retry_after)
            elif rw:
                held = HeldError(resource, expires_at=parse_time(doc.get("free_at")), retry_after=retry_after)
            else:
                held = HeldError(resource, expires_at=parse_time(doc.get("expires_at")), retry_after=retry_after)
            attach_queue_ticket(held, doc)
            raise held
        if rw:
            grant: Any = parse_rw_lease(doc.get("lease"), what, resource, rw)
        else:
            grant = parse_permit(PermitInfo, doc.get("permit"), what, resource) if permits else parse_lock(Lock, doc.get("lock"), what)
        if give_up is not None and time.monotonic() >= give_up:
            self._discard(grant)
            raise AcquireTimeout(resource, grant.fencing_token, time.monotonic() - (start or t0))
        try:
            if rw:
                return RWLease(self, grant, ttl, t0, keepalive)
            if permits:
                return Permit(self, grant, permits, ttl, t0, keepalive)
            return Lease(self, grant, ttl, t0, keepalive)
        except BaseException:
            self._discard(grant)
            raise

    def _discard(self, grant: Any) -> None:
        """Releases a grant nobody will use (a Lock, or a PermitInfo: by
        slot); failures are ignored (the lease would run out by itself)."""
        if isinstance(grant, RWLeaseInfo):
            self._clean_up(grant.name, grant.owner, grant.fencing_token, grant.slot, grant.mode)
        elif isinstance(grant, PermitInfo):
            self._clean_up(grant.name, grant.owner, grant.fencing_token, grant.slot)
        else:
            self._clean_up(grant.resource, grant.owner, grant.fencing_token)

    def _release_unheard(self, resource: str, owner: str, permits: int = 0, rw: Optional[str] = None) -> None:
        """Releases owner's lease on resource (for a semaphore: the permit a
        status read finds owner holding; for a read/write lock: owner's
        leases of mode rw it finds), if a request whose answer was lost
        created one. Only for generated owners, unique to one acquire call,
        so it can only end a lease of that call."""
        if rw:
            try:
                st = self._rw_status(resource, max(min(self.timeout, _CLEANUP_TIMEOUT), 0.001))
            except LockError:
                return  # the lease, if any, runs out by itself
            for h in ([st.writer] if st.writer else []) + st.readers:
                if h.owner == owner and h.mode == rw:
                    self._clean_up(resource, owner, h.fencing_token, h.slot, h.mode)
            return
        if not permits:
            self._clean_up(resource, owner, None)
            return
        try:
            _, holders = self._semaphore(resource, max(min(self.timeout, _CLEANUP_TIMEOUT), 0.001))
        except LockError:
            return  # the permit, if any, runs out by itself
        for h in holders:
            if h.owner == owner:
                self._clean_up(resource, owner, h.fencing_token, h.slot)

    def _clean_up(self, resource: str, owner: str, token: Optional[int], slot: Optional[int] = None,
                  mode: Optional[str] = None) -> None:
        """The clean-up release: temporary failures (503, throttling, no
        answer) are retried with backoff for up to _CLEANUP_TIMEOUT in all;
        the rest are ignored (the lease runs out by itself)."""
        with self._cleanups_done:
            self._cleanups += 1
        try:
            give_up = time.monotonic() + _CLEANUP_TIMEOUT
            attempt = 0
            while True:
                try:
                    timeout = max(min(self.timeout, give_up - time.monotonic()), 0.001)
                    if mode is not None:
                        self._release_rw(resource, owner, mode, slot, token, timeout)
                    elif slot is None:
                        self._release(resource, owner, token, timeout)
                    else:
                        self._release_permit(resource, owner, slot, token, timeout)
                    return
                except LockError as e:
                    if not retryable(e):
                        return
                    pause = self.backoff.delay(attempt, hint(e))
                    attempt += 1
                    if time.monotonic() + pause > give_up:
                        return
                    time.sleep(pause)
        finally:
            with self._cleanups_done:
                self._cleanups -= 1
                self._cleanups_done.notify_all()

    # -- the other operations ---------------------------------------------

    def status(self, resource: str) -> Lock:
        """The live lease on resource; NotFoundError when there is none."""
        resource = check_resource(resource)
        _, doc = self._send("GET", lock_path(resource), None, self.timeout, f"status {resource!r}")
        return parse_lock(Lock, doc, f"status {resource!r}")

    def watch(self, resource: str, index: int = 0, wait: Number = MAX_SERVER_WAIT) -> WatchResult:
        """The state of resource's lock once it differs from ``index`` (the
        ``index`` of the previous answer; 0: nothing seen yet), or when
        ``wait`` whole seconds (0 to 20; 0: at once) have passed: a blocking
        status, one request. A renewal is no change; a grant, a release, an
        expiry and a force release are. Compare the answer's
        ``fencing_token`` with the one seen before: tokens grow by one per
        grant, so a jump from a to b means b − a − 1 leases came and went
        unseen (the service reads the lock about seven times a second).
        Errors are raised as they come (a 503 included): Election.observe()
        is the loop that retries."""
        resource = check_resource(resource)
        index, wait = check_index(index), check_watch_wait(wait, MAX_SERVER_WAIT)
        what = f"watch {resource!r}"
        path = f"{lock_path(resource)}/watch?index={index}&wait_seconds={wait}"
        _, doc = self._send("GET", path, None, self.timeout + wait, what)
        result = parse_watch(doc, what)
        if result.resource != resource:
            raise TransportError(f"{what}: the answer is about {result.resource!r}")
        return result

    def election(self, name: str) -> Election:
        """An election on the lock ``name``: campaign() for leadership (a lease
        that renews itself), leader(), observe() the changes, resign(). One
        Election per candidate; it holds the lease of its last campaign."""
        return Election(self, check_resource(name))

    def renew(self, resource: str, owner: str, *, ttl: Number = DEFAULT_TTL, fencing_token: Optional[int] = None) -> Lock:
        """Extends owner's live lease on resource to ttl from now; with
        fencing_token the live lease must carry it (StaleTokenError
        otherwise). An expired lease cannot be renewed (NotFoundError). Most
        callers use Lease.renew or the keep-alive instead."""
        resource, ttl = check_resource(resource), check_ttl(ttl)
        owner, _ = owner_or_default(owner, required=True)
        return self._renew(resource, owner, ttl, check_token(fencing_token), self.timeout)

    def release(self, resource: str, owner: str, *, fencing_token: Optional[int] = None) -> None:
        """Ends owner's live lease on resource; with fencing_token the live
        lease must carry it. NotFoundError when there is no live lease,
        ForbiddenError when another owner holds it, StaleTokenError when a
        newer lease replaced the token's. Most callers use Lease.release
        instead."""
        resource = check_resource(resource)
        owner, _ = owner_or_default(owner, required=True)
        self._release(resource, owner, check_token(fencing_token), self.timeout)

    def _renew(self, resource: str, owner: str, ttl: int, token: Optional[int], timeout: float) -> Lock:
        payload: Dict[str, Any] = {"owner": owner, "ttl_seconds": ttl}
        if token is not None:
            payload["fencing_token"] = token
        what = f"renew {resource!r}"
        _, doc = self._send("POST", lock_path(resource) + "/renew", payload, timeout, what)
        if not isinstance(doc, dict) or doc.get("renewed") is not True:
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        return parse_lock(Lock, doc.get("lock"), what)

    def _release(self, resource: str, owner: str, token: Optional[int], timeout: float) -> None:
        payload: Dict[str, Any] = {"owner": owner}
        if token is not None:
            payload["fencing_token"] = token
        self._send("DELETE", lock_path(resource), payload, timeout, f"release {resource!r}")

    # -- semaphores ------------------------------------------------------------

    def try_acquire_semaphore(
        self,
        name: str,
        permits: int,
        *,
        ttl: Number = DEFAULT_TTL,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
    ) -> Permit:
        """Asks once for one of the ``permits`` permits (1 to 100; every
        acquirer gives the same number) of the semaphore ``name``, with
        try_acquire's arguments. Returns the Permit (a Lease in a slot of its
        own, its keep-alive running), or raises FullError (a HeldError) when
        every permit is held by others, or PermitsMismatchError when the
        semaphore has another number of permits. An owner that holds a permit
        gets its slot again, with a new token: one permit per owner."""
        return self._try_acquire(name, check_permits(permits), ttl, owner, keepalive, lock_delay)  # type: ignore[return-value]

    def acquire_semaphore(
        self,
        name: str,
        permits: int,
        *,
        wait: Optional[Number] = DEFAULT_ACQUIRE_WAIT,
        ttl: Number = DEFAULT_TTL,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
    ) -> Permit:
        """Waits up to ``wait`` seconds (default 30; None: without limit; 0:
        once) for one of the ``permits`` permits of the semaphore ``name``, as
        acquire() waits for a lock: in rounds at the service that send back
        their place in the queue, or polling a service that does not wait for
        permits (it answers 422 to wait_seconds; remembered). Raises
        FullError when the wait runs out while the semaphore stays full;
        otherwise as try_acquire_semaphore."""
        return self._acquire(name, check_permits(permits), wait, ttl, owner, keepalive, lock_delay)  # type: ignore[return-value]

    @contextlib.contextmanager
    def semaphore(
        self,
        name: str,
        permits: int,
        *,
        ttl: Number = DEFAULT_TTL,
        wait: Optional[Number] = DEFAULT_ACQUIRE_WAIT,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
    ) -> Iterator[Permit]:
        """``with client.semaphore("exports", 3) as permit: ...``

        client.lock() for a semaphore: takes one of its permits as
        acquire_semaphore() does, keeps it alive while the block runs, and
        always releases it; LeaseLostError (with the permit's ``slot``) on
        exit when the permit was lost meanwhile."""
        permit = self.acquire_semaphore(name, permits, wait=wait, ttl=ttl, owner=owner, keepalive=keepalive,
                                        lock_delay=lock_delay)
        with permit:
            yield permit

    def semaphore_status(self, name: str) -> SemaphoreStatus:
        """The semaphore's number of permits (None when it has no record) and
        its live permits, by slot: one strongly consistent read. A semaphore
        nobody holds has no holders (not an error)."""
        name = check_resource(name)
        permits, holders = self._semaphore(name, self.timeout)
        return SemaphoreStatus(name, permits, holders)

    def _semaphore(self, name: str, timeout: float) -> Tuple[Optional[int], List[PermitInfo]]:
        what = f"status of semaphore {name!r}"
        _, doc = self._send("GET", semaphore_path(name), None, timeout, what)
        return parse_semaphore(doc, name, what)

    def watch_semaphore(self, name: str, index: int = 0, wait: Number = MAX_SERVER_WAIT) -> SemaphoreWatchResult:
        """watch() for a semaphore: its state once it differs from ``index``
        (a grant, or the end of a permit; a renewal is no change), or when
        ``wait`` whole seconds (0 to 20) have passed. One request; errors are
        raised as they come."""
        name = check_resource(name)
        index, wait = check_index(index), check_watch_wait(wait, MAX_SERVER_WAIT)
        what = f"watch semaphore {name!r}"
        _, doc = self._send("GET", f"{semaphore_path(name)}/watch?index={index}&wait_seconds={wait}", None,
                            self.timeout + wait, what)
        permits, holders = parse_semaphore(doc, name, what)
        new_index, changed, token = doc.get("index"), doc.get("changed"), doc.get("fencing_token")
        if type(new_index) is not int or new_index < 0 or not isinstance(changed, bool) or \
                (token is not None and (type(token) is not int or token < 1)):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        return SemaphoreWatchResult(name, new_index, changed, permits, token, holders)

    def renew_permit(self, name: str, owner: str, slot: int, *, ttl: Number = DEFAULT_TTL,
                     fencing_token: Optional[int] = None) -> PermitInfo:
        """Extends owner's live permit in ``slot`` of the semaphore ``name`` to
        ttl from now; errors as for renew(). Most callers use Permit.renew or
        the keep-alive instead."""
        name, ttl = check_resource(name), check_ttl(ttl)
        owner, _ = owner_or_default(owner, required=True)
        return self._renew_permit(name, owner, check_slot(slot), ttl, check_token(fencing_token), self.timeout)

    def release_permit(self, name: str, owner: str, slot: int, *, fencing_token: Optional[int] = None) -> None:
        """Ends owner's live permit in ``slot`` of the semaphore ``name``; the
        slot is free at once. Errors as for release(). Most callers use
        Permit.release instead."""
        name = check_resource(name)
        owner, _ = owner_or_default(owner, required=True)
        self._release_permit(name, owner, check_slot(slot), check_token(fencing_token), self.timeout)

    def _renew_permit(self, name: str, owner: str, slot: int, ttl: int, token: Optional[int], timeout: float) -> PermitInfo:
        payload: Dict[str, Any] = {"owner": owner, "slot": slot, "ttl_seconds": ttl}
        if token is not None:
            payload["fencing_token"] = token
        what = f"renew semaphore {name!r}"
        _, doc = self._send("POST", semaphore_path(name) + "/renew", payload, timeout, what)
        if not isinstance(doc, dict) or doc.get("renewed") is not True:
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        permit = parse_permit(PermitInfo, doc.get("permit"), what, name)
        if permit.slot != slot:
            raise TransportError(f"{what}: the response renewed slot {permit.slot}, not {slot}")
        return permit

    def _release_permit(self, name: str, owner: str, slot: int, token: Optional[int], timeout: float) -> None:
        payload: Dict[str, Any] = {"owner": owner, "slot": slot}
        if token is not None:
            payload["fencing_token"] = token
        self._send("DELETE", semaphore_path(name), payload, timeout, f"release semaphore {name!r}")

    # -- read/write locks ----------------------------------------------------

    def try_acquire_read(self, name: str, *, ttl: Number = DEFAULT_TTL, owner: Optional[str] = None,
                         keepalive: bool = True, lock_delay: Optional[Number] = None) -> RWLease:
        """Asks once for a reader's lease of the read/write lock ``name``
        (arguments as for try_acquire). Returns the RWLease, in a slot of its
        own, or raises HeldError when a writer holds or is queued, or every
        one of the 64 slots is taken. One owner may hold several readers'
        leases."""
        return self._try_acquire(name, 0, ttl, owner, keepalive, lock_delay, "read")  # type: ignore[return-value]

    def try_acquire_write(self, name: str, *, ttl: Number = DEFAULT_TTL, owner: Optional[str] = None,
                          keepalive: bool = True, lock_delay: Optional[Number] = None) -> RWLease:
        """Asks once for the writer's lease of the read/write lock ``name``;
        HeldError while any lease is held (a reader's of the same owner too:
        no upgrade) or a waiter is queued."""
        return self._try_acquire(name, 0, ttl, owner, keepalive, lock_delay, "write")  # type: ignore[return-value]

    def acquire_read(self, name: str, *, wait: Optional[Number] = DEFAULT_ACQUIRE_WAIT, ttl: Number = DEFAULT_TTL,
                     owner: Optional[str] = None, keepalive: bool = True, lock_delay: Optional[Number] = None) -> RWLease:
        """Waits up to ``wait`` seconds for a reader's lease of ``name`` as
        acquire() waits for a lock: a try first, then rounds on
        ``POST /rwlocks/{name}/read/wait`` in the lock's one queue (a reader
        behind a queued writer waits for it), or polling a service that does
        not wait (422 to wait_seconds, or no such route; remembered).
        HeldError when the wait runs out."""
        return self._acquire(name, 0, wait, ttl, owner, keepalive, lock_delay, "read")  # type: ignore[return-value]

    def acquire_write(self, name: str, *, wait: Optional[Number] = DEFAULT_ACQUIRE_WAIT, ttl: Number = DEFAULT_TTL,
                      owner: Optional[str] = None, keepalive: bool = True, lock_delay: Optional[Number] = None) -> RWLease:
        """Waits for the writer's lease of ``name`` as acquire_read waits for
        a reader's; once queued, it keeps every later reader out and waits
        only for the leases granted before."""
        return self._acquire(name, 0, wait, ttl, owner, keepalive, lock_delay, "write")  # type: ignore[return-value]

    @contextlib.contextmanager
    def read_lock(self, name: str, *, ttl: Number = DEFAULT_TTL, wait: Optional[Number] = DEFAULT_ACQUIRE_WAIT,
                  owner: Optional[str] = None, keepalive: bool = True, lock_delay: Optional[Number] = None) -> Iterator[RWLease]:
        """``with client.read_lock("cache") as lease: ...``: lock() for a
        reader's lease (acquire_read), released when the block ends;
        LeaseLostError on exit when it was lost meanwhile."""
        lease = self.acquire_read(name, wait=wait, ttl=ttl, owner=owner, keepalive=keepalive, lock_delay=lock_delay)
        with lease:
            yield lease

    @contextlib.contextmanager
    def write_lock(self, name: str, *, ttl: Number = DEFAULT_TTL, wait: Optional[Number] = DEFAULT_ACQUIRE_WAIT,
                   owner: Optional[str] = None, keepalive: bool = True, lock_delay: Optional[Number] = None) -> Iterator[RWLease]:
        """``with client.write_lock("cache") as lease: ...``: read_lock for the
        writer's lease (acquire_write)."""
        lease = self.acquire_write(name, wait=wait, ttl=ttl, owner=owner, keepalive=keepalive, lock_delay=lock_delay)
        with lease:
            yield lease

    def rw_status(self, name: str) -> RWStatus:
        """The read/write lock ``name``'s live writer or readers, its queue and
        latest token (none held is not an error). A strongly consistent read."""
        return self._rw_status(check_resource(name), self.timeout)

    def _rw_status(self, name: str, timeout: float) -> RWStatus:
        what = f"status of read/write lock {name!r}"
        _, doc = self._send("GET", rw_path(name), None, timeout, what)
        return parse_rw_status(doc, name, what)

    def watch_rw(self, name: str, index: int = 0, wait: Number = MAX_SERVER_WAIT) -> RWWatchResult:
        """watch() for a read/write lock: its writer and readers once its
        state differs from ``index`` (a grant or an end, read or write; a
        renewal is no change), or when ``wait`` whole seconds (0 to 20) have
        passed. One request; errors are raised as they come."""
        name = check_resource(name)
        index, wait = check_index(index), check_watch_wait(wait, MAX_SERVER_WAIT)
        what = f"watch read/write lock {name!r}"
        _, doc = self._send("GET", f"{rw_path(name)}/watch?index={index}&wait_seconds={wait}", None,
                            self.timeout + wait, what)
        return parse_rw_watch(doc, name, what)

    def renew_rw(self, name: str, owner: str, mode: str, slot: Optional[int] = None, *, ttl: Number = DEFAULT_TTL,
                 fencing_token: Optional[int] = None) -> RWLeaseInfo:
        """Extends owner's live lease of ``mode`` (a reader's: in ``slot``) of
        the read/write lock ``name`` to ttl from now; errors as for renew(),
        and a lease the other mode's later grant judged ended is
        NotFoundError. Most callers use RWLease.renew or the keep-alive."""
        name, ttl = check_resource(name), check_ttl(ttl)
        owner, _ = owner_or_default(owner, required=True)
        return self._renew_rw(name, owner, mode, check_mode(mode, slot), ttl, check_token(fencing_token), self.timeout)

    def release_rw(self, name: str, owner: str, mode: str, slot: Optional[int] = None, *,
                   fencing_token: Optional[int] = None) -> None:
        """Ends owner's live lease of ``mode`` (a reader's: in ``slot``) of the
        read/write lock ``name``; errors as for release()."""
        name = check_resource(name)
        owner, _ = owner_or_default(owner, required=True)
        self._release_rw(name, owner, mode, check_mode(mode, slot), check_token(fencing_token), self.timeout)

    @staticmethod
    def _rw_body(owner: str, mode: str, slot: Optional[int], token: Optional[int]) -> Dict[str, Any]:
        payload: Dict[str, Any] = {"owner": owner, "mode": mode}
        if mode == "read":
            payload["slot"] = slot
        if token is not None:
            payload["fencing_token"] = token
        return payload

    def _renew_rw(self, name: str, owner: str, mode: str, slot: Optional[int], ttl: int, token: Optional[int],
                  timeout: float) -> RWLeaseInfo:
        payload = self._rw_body(owner, mode, slot, token)
        payload["ttl_seconds"] = ttl
        what = f"renew {mode} lock {name!r}"
        _, doc = self._send("POST", rw_path(name) + "/renew", payload, timeout, what)
        if not isinstance(doc, dict) or doc.get("renewed") is not True:
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        lease = parse_rw_lease(doc.get("lease"), what, name, mode)
        if lease.slot != slot:
            raise TransportError(f"{what}: the response renewed slot {lease.slot}, not {slot}")
        return lease

    def _release_rw(self, name: str, owner: str, mode: str, slot: Optional[int], token: Optional[int], timeout: float) -> None:
        self._send("DELETE", rw_path(name), self._rw_body(owner, mode, slot, token), timeout, f"release {mode} lock {name!r}")

    # -- lock sets ---------------------------------------------------------------

    def try_acquire_set(
        self,
        names: Sequence[str],
        *,
        ttl: Number = DEFAULT_TTL,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
        prefix: Optional[str] = None,
    ) -> LockSet:
        """Asks once for every one of ``names`` (1 to 25, none twice), all or
        none, for one owner, with try_acquire's arguments. ``prefix`` is the
        path prefix of the set's requests (``/locksets/{prefix}``): every name
        must begin with it, so an IAM policy scoped by path prefix covers the
        set; default the names' longest common prefix. Returns the LockSet (a
        lease per name, renewed together), or raises LockSetHeldError (a
        HeldError) naming the name that refused the set: nothing is held
        then. One request."""
        return self._acquire_set(names, 0, ttl, owner, keepalive, lock_delay, prefix)

    def acquire_set(
        self,
        names: Sequence[str],
        *,
        wait: Optional[Number] = DEFAULT_ACQUIRE_WAIT,
        ttl: Number = DEFAULT_TTL,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
        prefix: Optional[str] = None,
    ) -> LockSet:
        """Waits up to ``wait`` seconds (default 30; None: without limit; 0:
        once) for every one of ``names``, all or none, as acquire() waits for
        a lock: a try first, and only while the set is refused, rounds at the
        service (``POST /locksets/{prefix}/wait``), which waits holding
        nothing (a set takes no place in any queue, so sets cannot deadlock).
        A service that does not wait for sets (422 naming wait_seconds, or no
        such route; remembered) is polled with tries. Raises LockSetHeldError
        when the wait runs out; otherwise as try_acquire_set."""
        return self._acquire_set(names, wait, ttl, owner, keepalive, lock_delay, prefix)

    @contextlib.contextmanager
    def lock_set(
        self,
        names: Sequence[str],
        *,
        ttl: Number = DEFAULT_TTL,
        wait: Optional[Number] = DEFAULT_ACQUIRE_WAIT,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
        prefix: Optional[str] = None,
    ) -> Iterator[LockSet]:
        """``with client.lock_set(["acct:17", "acct:42"]) as locks: ...``

        client.lock() for several names: takes them all as acquire_set()
        does, keeps the set alive while the block runs, and always releases
        it (one request). LeaseLostError on exit when a lease of the set was
        lost meanwhile: the work ran at least partly without it."""
        s = self.acquire_set(names, wait=wait, ttl=ttl, owner=owner, keepalive=keepalive, lock_delay=lock_delay,
                             prefix=prefix)
        with s:
            yield s

    def _acquire_set(self, names: Sequence[str], wait: Optional[Number], ttl: Number, owner: Optional[str],
                     keepalive: bool, lock_delay: Optional[Number], prefix: Optional[str]) -> LockSet:
        names = list(names) if not isinstance(names, str) else names  # a str is refused below
        prefix = _set_prefix(names, prefix)
        wait, ttl = check_wait(wait), check_ttl(ttl)
        delay = check_lock_delay(lock_delay)
        owner, generated = owner_or_default(owner)
        start = time.monotonic()
        # A try (wait 0) keeps a grant however late it comes, as try_acquire does.
        give_up = None if wait is None or wait == 0 or math.isinf(wait) else start + wait
        last: Optional[BaseException] = None
        attempt = 0
        held = False  # a try found the set refused: rounds at the service from then on
        # The last round's queue_ticket: its place in the queue it waited in.
        ticket: Optional[str] = None
        try:
            while True:
                ws = self._set_wait_seconds(give_up, ttl) if held and wait != 0 else 0
                sent = time.monotonic()
                try:
                    return self._set_attempt(prefix, names, owner, ttl, ws, give_up, keepalive, delay, start,
                                             queue_ticket=ticket if ws else None)
                except _NoServerWait:
                    self._set_server_wait = False
                    continue
                except AcquireTimeout:
                    raise
                except HeldError as e:
                    last = e
                    if ws:
                        ticket = getattr(e, "_queue_ticket", None)
                    if not held:
                        held = True
                        if wait != 0 and self._set_wait_seconds(give_up, ttl) >= 1:
                            continue
                except LockError as e:
                    if not retryable(e):
                        raise
                    last = e
                now = time.monotonic()
                if wait == 0 or (give_up is not None and now >= give_up):
                    break
                if ws and isinstance(last, HeldError) and now - sent >= min(0.9 * ws, 1.0):
                    continue  # the service waited: ask again at once
                pause = self.backoff.delay(attempt, hint(last))
                attempt += 1
                if give_up is not None:
                    pause = min(pause, give_up - now)
                time.sleep(max(pause, 0.0))
                if give_up is not None and time.monotonic() >= give_up:
                    break
        except BaseException as e:
            if generated and maybe_granted(e):
                for n in names:
                    self._clean_up(n, owner, None)
            raise
        if isinstance(last, LockSetHeldError):
            raise LockSetHeldError(last.blocked_by, last.free_at, last.retry_after, last.unreleased,
                                   waited=time.monotonic() - start) from None
        assert last is not None
        if generated and maybe_granted(last):
            for n in names:
                self._clean_up(n, owner, None)
        raise last

    def _set_wait_seconds(self, give_up: Optional[float], ttl: int) -> int:
        """_server_wait_seconds for a lock set's round."""
        if not self._server_wait or self._set_server_wait is False:
            return 0
        ws = min(MAX_SERVER_WAIT, int(round_limit(ttl, lease_margin(ttl, self.lease_margin))))
        if give_up is not None:
            ws = min(ws, int(give_up - time.monotonic() - _SERVER_WAIT_SLACK))
        return max(0, ws)

    def _set_attempt(self, prefix: str, names: List[str], owner: str, ttl: int, wait_seconds: int,
                     give_up: Optional[float], keepalive: bool, lock_delay: int, start: float,
                     queue_ticket: Optional[str] = None) -> LockSet:
        """One set request: a try to POST /locksets/{prefix}, or with
        wait_seconds a round to its …/wait, bringing back queue_ticket (the
        last round's). A grant that arrives after give_up is released. A
        refused round's ticket is the LockSetHeldError's ``_queue_ticket``."""
        t0 = time.monotonic()  # before sending: no lease of the set can have started earlier
        payload: Dict[str, Any] = {"owner": owner, "ttl_seconds": ttl, "names": names}
        if wait_seconds:
            payload["wait_seconds"] = wait_seconds
            if queue_ticket:
                payload["queue_ticket"] = queue_ticket
        if lock_delay:
            payload["lock_delay_seconds"] = lock_delay
        timeout = self.timeout + wait_seconds
        if give_up is not None:
            timeout = min(timeout, max(give_up - t0, 0.0) + _LATE_ANSWER_GRACE)
        what = f"acquire lock set {names!r}"
        path = set_path(prefix) + ("/wait" if wait_seconds else "")
        try:
            resp, doc = self._send("POST", path, payload, timeout, what)
        except LockError as e:
            if wait_seconds and (no_wait_route(e) or (
                    isinstance(e, ValidationError) and any(f.field == "wait_seconds" for f in e.errors))):
                raise _NoServerWait() from e
            raise
        if not isinstance(doc, dict) or not isinstance(doc.get("acquired"), bool):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        if wait_seconds:
            self._set_server_wait = True
        if not doc["acquired"]:
            blocked = doc.get("blocked_by")
            if not isinstance(blocked, str):
                raise TransportError(f"{what}: malformed response: no blocked_by: {doc!r:.200}")
            unreleased = [n for n in doc.get("unreleased") or [] if isinstance(n, str)]
            held = LockSetHeldError(blocked, parse_time(doc.get("free_at")),
                                    parse_retry_after(resp.headers.get("retry-after")), unreleased)
            attach_queue_ticket(held, doc)
            raise held
        set_id, docs = doc.get("set_id"), doc.get("locks")
        if not isinstance(set_id, str) or not isinstance(docs, list):
            raise TransportError(f"{what}: malformed response: no set_id or locks: {doc!r:.200}")
        grants = [parse_lock(Lock, d, what) for d in docs]
        if sorted(g.resource for g in grants) != sorted(names):
            raise TransportError(f"{what}: malformed response: locks {[g.resource for g in grants]!r} for {names!r}")
        if give_up is not None and time.monotonic() >= give_up:
            self._release_set_grant(prefix, owner, grants)
            raise AcquireTimeout(blocked_name(grants), grants[0].fencing_token, time.monotonic() - start)
        leases: List[Lease] = []
        try:
            for g in grants:
                leases.append(Lease(self, g, ttl, t0, keepalive=False))
            s = LockSet(self, prefix, set_id, owner, ttl, leases, keepalive)
        except BaseException:
            for l in leases:
                l._end_released()
            self._release_set_grant(prefix, owner, grants)
            raise
        return s

    def _release_set_grant(self, prefix: str, owner: str, grants: List[Lock]) -> None:
        """Releases a set's grant nobody will use, in one request (retried as
        a clean-up is); failures are ignored (the leases run out)."""
        with self._cleanups_done:
            self._cleanups += 1
        try:
            give_up = time.monotonic() + _CLEANUP_TIMEOUT
            attempt = 0
            while True:
                try:
                    self._set_request("DELETE", prefix, {"owner": owner, "locks": _set_locks(grants)},
                                      max(min(self.timeout, give_up - time.monotonic()), 0.001), "release lock set")
                    return
                except LockError as e:
                    if not retryable(e):
                        return
                    pause = self.backoff.delay(attempt, hint(e))
                    attempt += 1
                    if time.monotonic() + pause > give_up:
                        return
                    time.sleep(pause)
        finally:
            with self._cleanups_done:
                self._cleanups -= 1
                self._cleanups_done.notify_all()

    def _renew_set(self, prefix: str, owner: str, ttl: int, leases: Sequence[Lease], timeout: float) -> List[SetItem]:
        return self._set_request("POST", prefix, {"owner": owner, "ttl_seconds": ttl, "locks": _set_locks(leases)},
                                 timeout, "renew lock set", "/renew")

    def _release_set(self, prefix: str, owner: str, leases: Sequence[Lease], timeout: float) -> List[SetItem]:
        return self._set_request("DELETE", prefix, {"owner": owner, "locks": _set_locks(leases)}, timeout,
                                 "release lock set")

    def _set_request(self, method: str, prefix: str, payload: Dict[str, Any], timeout: float, op: str,
                     suffix: str = "") -> List[SetItem]:
        """A set's renew or release: each name's outcome ([] on a 204: every
        name released)."""
        sent = [l["resource"] for l in payload["locks"]]
        what = f"{op} {sent!r}"
        resp, doc = self._send(method, set_path(prefix) + suffix, payload, timeout, what)
        if resp.status == 204:
            return []
        if not isinstance(doc, dict) or not isinstance(doc.get("locks"), list):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        items = []
        for it in doc["locks"]:
            if not isinstance(it, dict) or it.get("resource") not in sent or not isinstance(it.get("ok"), bool):
                raise TransportError(f"{what}: malformed item: {it!r:.200}")
            name = it["resource"]
            if it["ok"]:
                lock = parse_lock(Lock, it["lock"], what) if it.get("lock") is not None else None
                items.append(SetItem(name, True, lock, None))
                continue
            p = it.get("problem")
            status = p.get("status") if isinstance(p, dict) and isinstance(p.get("status"), int) else 0
            err = problem_from_answer(status, p, None, http.client.responses.get(status, "error"))
            err.args = (f"{what}: {name!r}: {err.args[0]}",)
            items.append(SetItem(name, False, None, err))
        return items

    # -- HTTP ----------------------------------------------------------------

    def _send(self, method: str, path: str, payload: Any, timeout: float, what: str) -> Tuple[Response, Any]:
        """One request: the 2xx answer and its JSON body (None when empty), a
        ProblemError for any other status, a TransportError when there is no
        answer."""
        url = self.endpoint + path
        body = None if payload is None else json.dumps(payload, separators=(",", ":")).encode()
        headers = {"Accept": "application/json, application/problem+json"}
        if self.user_agent:
            headers["User-Agent"] = self.user_agent
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._signer is not None:
            headers = self._signer.sign(method, url, headers, body)
        try:
            resp = self._transport(method, url, headers, body, timeout)
        except (OSError, http.client.HTTPException) as e:
            raise TransportError(f"{what}: {_describe(e)}", maybe_sent=not _refused(e)) from e
        doc = None
        if resp.body.strip():
            try:
                doc = json.loads(resp.body)
            except ValueError:
                if 200 <= resp.status <= 299:
                    raise TransportError(f"{what}: malformed {resp.status} response: not JSON") from None
        if 200 <= resp.status <= 299:
            return resp, doc
        reason = http.client.responses.get(resp.status, "HTTP error")
        err = problem_from_answer(resp.status, doc, parse_retry_after(resp.headers.get("retry-after")), reason)
        err.args = (f"{what}: {err.args[0]}",)
        if isinstance(doc, dict) and doc.get("current") is not None:
            try:
                if isinstance(doc["current"], dict) and "mode" in doc["current"]:
                    err.current_rw_lease = parse_rw_lease(doc["current"], what, doc["current"].get("name"), None, AdminRWLease)
                elif isinstance(doc["current"], dict) and "slot" in doc["current"]:
                    err.current_permit = AdminPermit._parse(doc["current"])
                else:
                    err.current = AdminLock._parse(doc["current"])
            except (ValueError, TransportError):
                pass  # the error stands without it
        raise err


def set_path(prefix: str) -> str:
    """The path of a lock set's requests."""
    return "/locksets/" + escape(prefix)


def blocked_name(grants: List[Lock]) -> str:
    """The name an AcquireTimeout of a set names: its first."""
    return grants[0].resource


def _set_locks(leases: Sequence[Any]) -> List[Dict[str, Any]]:
    """The ``locks`` of a set's renew or release request (Leases or Locks)."""
    return [{"resource": l.resource, "fencing_token": l.fencing_token} for l in leases]


def _set_prefix(names: Any, given: Optional[str]) -> str:
    """A set's path prefix: ``given``, or the names' longest common prefix.
    Checks the names: 1 to MAX_SET_NAMES lock names beginning with it, none
    twice."""
    if isinstance(names, str) or not isinstance(names, list) or not 1 <= len(names) <= MAX_SET_NAMES:
        raise InvalidRequest(f"names {names!r:.100}: want a list of 1 to {MAX_SET_NAMES} lock names")
    for n in names:
        check_resource(n)
    if len(set(names)) != len(names):
        raise InvalidRequest(f"names {names!r:.100}: a name is given twice")
    if given is None:
        given = os.path.commonprefix(names)
        if not given:
            raise InvalidRequest(f"names {names!r:.100}: they share no prefix: give one as prefix= (each name must begin with it)")
    prefix = check_resource(given)
    for n in names:
        if not n.startswith(prefix):
            raise InvalidRequest(f"name {n!r} does not begin with the prefix {prefix!r}")
    return prefix


def _refused(e: BaseException) -> bool:
    """Whether the request certainly did not reach the service."""
    reason = e.reason if isinstance(e, urllib.error.URLError) else e
    return isinstance(reason, (ConnectionRefusedError, NotSent))


def _describe(e: BaseException) -> str:
    if isinstance(e, urllib.error.URLError) and not isinstance(e, urllib.error.HTTPError):
        e = e.reason if isinstance(e.reason, BaseException) else e
    if isinstance(e, socket.timeout):
        return "timed out"
    return str(e) or type(e).__name__
