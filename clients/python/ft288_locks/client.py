"""The lock service client."""

from __future__ import annotations

import contextlib
import datetime as _dt
import http.client
import json
import math
import os
import secrets
import socket
import time
import urllib.error
import urllib.parse
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional, Tuple, Union

from ._http import Response, Transport, UrllibTransport, parse_retry_after, parse_time
from ._retry import Backoff, hint, maybe_granted, retryable
from .errors import (
    AcquireTimeout,
    Held,
    InvalidRequest,
    LockError,
    TransportError,
    ValidationFailed,
    problem_from_answer,
)
from .lease import Lease, lease_margin, round_limit

DEFAULT_USER_AGENT = "ft288-locks-python-client/1"
DEFAULT_TIMEOUT = 30.0
"""Bounds one HTTP exchange, in seconds (a server-side wait is added to it)."""
DEFAULT_BACKOFF = (0.05, 2.0)
"""First retry delay's upper bound and the cap of every delay (and of Retry-After)."""
MAX_SERVER_WAIT = 20
"""The longest wait_seconds the service accepts. A round is shorter for a
short lease: see Client.acquire."""

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


@dataclass(frozen=True)
class Lock:
    """A live lease as the service reports it. Its times are the service's
    clock: informational, never a basis for deciding whether the lease is
    still held (see Lease.held and Lease.check)."""

    resource: str
    owner: str
    fencing_token: int
    acquired_at: _dt.datetime
    expires_at: _dt.datetime
    lock_delay_seconds: int = 0
    """The lease's lock-delay, 0 when it has none: expired unreleased, it keeps
    others out that much longer."""

    @classmethod
    def _from_json(cls, doc: Any, what: str) -> "Lock":
        if isinstance(doc, dict):
            token = doc.get("fencing_token")
            delay = doc.get("lock_delay_seconds", 0)
            acquired_at = parse_time(doc.get("acquired_at"))
            expires_at = parse_time(doc.get("expires_at"))
            resource, owner = doc.get("resource"), doc.get("owner")
            if (
                type(token) is int and token > 0
                and isinstance(resource, str) and isinstance(owner, str) and owner
                and acquired_at is not None and expires_at is not None
                and type(delay) is int and delay >= 0
            ):
                return cls(resource, owner, token, acquired_at, expires_at, delay)
        raise TransportError(f"{what}: malformed lock in response: {doc!r:.200}")


def default_owner() -> str:
    """A new owner string unique to this call: "host:pid:random hex"."""
    host = socket.gethostname()[:200] or "host"
    return f"{host}:{os.getpid()}:{secrets.token_hex(8)}"


class _NoServerWait(Exception):
    """The service rejected wait_seconds: it predates server-side waiting."""


class Client:
    """A client of one lock service. Safe for use from several threads; build
    one per process and share it.

    ``endpoint`` is the API's base URL, e.g. ``http://127.0.0.1:8080`` or
    ``https://abc123.execute-api.eu-west-1.amazonaws.com``. Options:

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
      Response`` that replaces urllib (tests, custom HTTP stacks).

    The constructor does not touch the network (with ``sigv4`` it may read
    AWS configuration files).
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
        self.endpoint = _base_url(endpoint)
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
        self._transport: Transport = transport or UrllibTransport()
        self._signer = None
        if sigv4:
            from ._sigv4 import SigV4

            self._signer = SigV4(region, credentials)
        elif region is not None or credentials is not None:
            raise ValueError("region and credentials are for signing: pass sigv4=True too")

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
        ttl: Number = 30,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
    ) -> Lease:
        """Asks once for a lease of ``ttl`` whole seconds on ``resource``.

        Returns the Lease (its keep-alive thread already running unless
        ``keepalive=False``), or raises Held when another owner holds the
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
        resource, ttl = _check_resource(resource), _check_ttl(ttl)
        delay = _check_lock_delay(lock_delay)
        owner, generated = _owner(owner)
        try:
            return self._attempt(resource, owner, ttl, 0, None, keepalive, delay)
        except BaseException as e:
            if generated and maybe_granted(e):
                self._release_unheard(resource, owner)
            raise

    def acquire(
        self,
        resource: str,
        *,
        wait: Optional[Number],
        ttl: Number = 30,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
    ) -> Lease:
        """Waits up to ``wait`` seconds (None: without limit) for a lease of
        ``ttl`` whole seconds on ``resource``.

        Where the service supports it, the service itself holds the request
        while the lock is taken (``wait_seconds``, up to 20 s a request, and
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

        When ``wait`` runs out it raises Held (the lock stayed held) or the
        last attempt's error. The answer of a request in flight at that moment
        is awaited for up to a second more: a grant in it is released again
        (with its fencing token) and AcquireTimeout is raised; a request
        whose outcome stays unknown is cleaned up by owner when the owner is
        the generated default. ``wait=0`` asks once, exactly like try_acquire.
        """
        if wait is not None and (isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0):
            raise InvalidRequest(f"wait {wait!r}: want a number of seconds >= 0, or None")
        if wait == 0:
            return self.try_acquire(resource, ttl=ttl, owner=owner, keepalive=keepalive, lock_delay=lock_delay)
        resource, ttl = _check_resource(resource), _check_ttl(ttl)
        delay = _check_lock_delay(lock_delay)
        owner, generated = _owner(owner)
        start = time.monotonic()
        give_up = None if wait is None or math.isinf(wait) else start + wait
        last: Optional[BaseException] = None
        attempt = 0
        try:
            while True:
                ws = self._server_wait_seconds(give_up, ttl)
                sent = time.monotonic()
                try:
                    return self._attempt(resource, owner, ttl, ws, give_up, keepalive, delay)
                except _NoServerWait:
                    self.server_wait_supported = False
                    continue
                except Held as e:
                    last = e
                except LockError as e:
                    if isinstance(e, AcquireTimeout) or not retryable(e):
                        raise
                    last = e
                now = time.monotonic()
                if give_up is not None and now >= give_up:
                    break
                if ws and isinstance(last, Held) and now - sent >= 0.9 * ws:
                    continue  # the service waited: ask again at once
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
                self._release_unheard(resource, owner)
            raise
        if isinstance(last, Held):
            raise Held(resource, last.expires_at, last.retry_after, waited=time.monotonic() - start) from None
        assert last is not None
        if generated and maybe_granted(last):
            self._release_unheard(resource, owner)
        raise last

    @contextlib.contextmanager
    def lock(
        self,
        resource: str,
        *,
        ttl: Number = 30,
        wait: Optional[Number] = 0,
        owner: Optional[str] = None,
        keepalive: bool = True,
        lock_delay: Optional[Number] = None,
    ) -> Iterator[Lease]:
        """``with client.lock("nightly-report", ttl=30) as lease: ...``

        Takes the lock (once, or waiting up to ``wait`` seconds; Held when it
        stays taken), keeps the lease alive while the block runs, and always
        releases it when the block ends. If the block raised, its exception
        propagates unchanged. If it finished but the lease was lost meanwhile
        (a renewal was refused, the local deadline passed, or the release
        found the lease gone), LeaseLost is raised on exit: the work ran at
        least partly without the lock.
        """
        lease = self.acquire(resource, wait=wait, ttl=ttl, owner=owner, keepalive=keepalive, lock_delay=lock_delay)
        with lease:
            yield lease

    def _server_wait_seconds(self, give_up: Optional[float], ttl: int) -> int:
        """The wait_seconds of the next request: at most MAX_SERVER_WAIT, the
        time left, and ⅔ × (ttl − margin), whole seconds; 0 (poll) when that
        is under a second."""
        if not self._server_wait or self.server_wait_supported is False:
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
    ) -> Lease:
        """One acquire request. A grant that arrives after give_up is released."""
        t0 = time.monotonic()  # before sending: the lease cannot have started earlier
        payload: Dict[str, Any] = {"owner": owner, "ttl_seconds": ttl}
        if wait_seconds:
            payload["wait_seconds"] = wait_seconds
        if lock_delay:
            payload["lock_delay_seconds"] = lock_delay
        timeout = self.timeout + wait_seconds
        if give_up is not None:
            timeout = min(timeout, max(give_up - t0, 0.0) + _LATE_ANSWER_GRACE)
        what = f"acquire {resource!r}"
        try:
            resp, doc = self._send("POST", _lock_path(resource), payload, timeout, what)
        except ValidationFailed as e:
            if wait_seconds and any(f.field == "wait_seconds" for f in e.errors):
                raise _NoServerWait() from e
            raise
        if not isinstance(doc, dict) or not isinstance(doc.get("acquired"), bool):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        if wait_seconds:
            self.server_wait_supported = True
        if not doc["acquired"]:
            raise Held(
                resource,
                expires_at=parse_time(doc.get("expires_at")),
                retry_after=parse_retry_after(resp.headers.get("retry-after")),
            )
        lock = Lock._from_json(doc.get("lock"), what)
        if give_up is not None and time.monotonic() >= give_up:
            self._discard(lock)
            raise AcquireTimeout(
                f"{what}: the grant (fencing token {lock.fencing_token}) arrived after the wait ran out; released it"
            )
        try:
            return Lease(self, lock, ttl, t0, keepalive)
        except BaseException:
            self._discard(lock)
            raise

    def _discard(self, lock: Lock) -> None:
        """Releases a grant nobody will use; failures are ignored (the lease
        would run out by itself)."""
        self._clean_up(lock.resource, lock.owner, lock.fencing_token)

    def _release_unheard(self, resource: str, owner: str) -> None:
        """Releases owner's lease on resource, if a request whose answer was
        lost created one. Only for generated owners, unique to one acquire
        call, so it can only end a lease of that call."""
        self._clean_up(resource, owner, None)

    def _clean_up(self, resource: str, owner: str, token: Optional[int]) -> None:
        """The clean-up release: temporary failures (503, throttling, no
        answer) are retried with backoff for up to _CLEANUP_TIMEOUT in all;
        the rest are ignored (the lease runs out by itself)."""
        give_up = time.monotonic() + _CLEANUP_TIMEOUT
        attempt = 0
        while True:
            try:
                self._release(resource, owner, token, max(min(self.timeout, give_up - time.monotonic()), 0.001))
                return
            except LockError as e:
                if not retryable(e):
                    return
                pause = self.backoff.delay(attempt, hint(e))
                attempt += 1
                if time.monotonic() + pause > give_up:
                    return
                time.sleep(pause)

    # -- the other operations ---------------------------------------------

    def status(self, resource: str) -> Lock:
        """The live lease on resource; NotFound when there is none."""
        resource = _check_resource(resource)
        _, doc = self._send("GET", _lock_path(resource), None, self.timeout, f"status {resource!r}")
        return Lock._from_json(doc, f"status {resource!r}")

    def renew(self, resource: str, owner: str, *, ttl: Number, fencing_token: Optional[int] = None) -> Lock:
        """Extends owner's live lease on resource to ttl from now; with
        fencing_token the live lease must carry it (StaleToken otherwise). An
        expired lease cannot be renewed (NotFound). Most callers use
        Lease.renew or the keep-alive instead."""
        resource, ttl = _check_resource(resource), _check_ttl(ttl)
        owner, _ = _owner(owner, required=True)
        return self._renew(resource, owner, ttl, _check_token(fencing_token), self.timeout)

    def release(self, resource: str, owner: str, *, fencing_token: Optional[int] = None) -> None:
        """Ends owner's live lease on resource; with fencing_token the live
        lease must carry it. NotFound when there is no live lease, Forbidden
        when another owner holds it, StaleToken when a newer lease replaced
        the token's. Most callers use Lease.release instead."""
        resource = _check_resource(resource)
        owner, _ = _owner(owner, required=True)
        self._release(resource, owner, _check_token(fencing_token), self.timeout)

    def _renew(self, resource: str, owner: str, ttl: int, token: Optional[int], timeout: float) -> Lock:
        payload: Dict[str, Any] = {"owner": owner, "ttl_seconds": ttl}
        if token is not None:
            payload["fencing_token"] = token
        what = f"renew {resource!r}"
        _, doc = self._send("POST", _lock_path(resource) + "/renew", payload, timeout, what)
        if not isinstance(doc, dict) or doc.get("renewed") is not True:
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        return Lock._from_json(doc.get("lock"), what)

    def _release(self, resource: str, owner: str, token: Optional[int], timeout: float) -> None:
        payload: Dict[str, Any] = {"owner": owner}
        if token is not None:
            payload["fencing_token"] = token
        self._send("DELETE", _lock_path(resource), payload, timeout, f"release {resource!r}")

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
        raise err


def _base_url(endpoint: str) -> str:
    if not isinstance(endpoint, str):
        raise ValueError(f"endpoint {endpoint!r}: want a URL string")
    u = urllib.parse.urlsplit(endpoint)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"endpoint {endpoint!r}: want http(s)://host[:port][/path]")
    if u.query or u.fragment or u.username or u.password:
        raise ValueError(f"endpoint {endpoint!r}: must not have a query, fragment or user info")
    netloc = u.netloc
    # Drop a default port: SigV4 signs the host without it, and urllib would
    # send it in the Host header.
    if (u.scheme, u.port) in (("http", 80), ("https", 443)):
        netloc = netloc.rsplit(":", 1)[0]
    return f"{u.scheme}://{netloc}{u.path.rstrip('/')}"


def _lock_path(resource: str) -> str:
    # The same escaping as the Go client's url.PathEscape.
    return "/locks/" + urllib.parse.quote(resource, safe="$&+:=@")


def _check_resource(resource: Any) -> str:
    if not isinstance(resource, str) or not resource:
        raise InvalidRequest(f"resource {resource!r}: want a non-empty string")
    if "/" in resource or resource in (".", ".."):
        # The service refuses "/" too, but a gateway may route an encoded "/"
        # (or normalise a "." or ".." segment) before the service sees it.
        raise InvalidRequest(f"resource {resource!r}: must not contain '/' or be '.' or '..'")
    return resource


def _check_ttl(ttl: Any) -> int:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl != int(ttl) or ttl < 1:
        raise InvalidRequest(f"ttl {ttl!r}: want a whole number of seconds, at least 1")
    return int(ttl)


def _check_lock_delay(delay: Any) -> int:
    if delay is None:
        return 0
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay != int(delay) or delay < 0:
        raise InvalidRequest(f"lock_delay {delay!r}: want a whole number of seconds, 0 or more")
    return int(delay)


def _check_token(token: Any) -> Optional[int]:
    if token is None:
        return None
    if type(token) is not int or token <= 0:
        raise InvalidRequest(f"fencing_token {token!r}: want a positive integer")
    return token


def _owner(owner: Optional[str], required: bool = False) -> Tuple[str, bool]:
    """The owner to use, and whether it was generated here."""
    if owner is None and not required:
        return default_owner(), True
    if not isinstance(owner, str) or not owner.strip():
        raise InvalidRequest(f"owner {owner!r}: want a non-blank string")
    return owner, False


def _refused(e: BaseException) -> bool:
    """Whether the request certainly did not reach the service."""
    reason = e.reason if isinstance(e, urllib.error.URLError) else e
    return isinstance(reason, ConnectionRefusedError)


def _describe(e: BaseException) -> str:
    if isinstance(e, urllib.error.URLError) and not isinstance(e, urllib.error.HTTPError):
        e = e.reason if isinstance(e.reason, BaseException) else e
    if isinstance(e, socket.timeout):
        return "timed out"
    return str(e) or type(e).__name__
