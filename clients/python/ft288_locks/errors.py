"""Exceptions of the lock client.

Everything the client raises is a :class:`LockError`::

    LockError
    ├── InvalidRequest (also a ValueError)   rejected before sending, or 400/413/422
    ├── ProblemError                         any error answer of the service or of API Gateway
    │   ├── NotFoundError       404 not-found: no live lease (absent, released, expired,
    │   │                       force released: .force_released)
    │   ├── ForbiddenError      403 forbidden: a live lease of another owner
    │   ├── StaleTokenError     409 stale-token: owner matches, fencing token does not; for a
    │   │                       force release, .current is the lease that blocks the lock
    │   ├── ValidationError     422 validation-failed (+ InvalidRequest); .errors lists the fields
    │   ├── InvalidJSON         400 invalid-json (+ InvalidRequest)
    │   ├── PayloadTooLarge     413 payload-too-large (+ InvalidRequest)
    │   ├── UnavailableError    503 service-unavailable (and 502/504); .retry_after
    │   ├── InternalError       500 internal (a setup error; not retried)
    │   └── GatewayError        API Gateway's own {"message": ...} answers (bad signature,
    │       │                   wrong URL, throttling); never NotFoundError/ForbiddenError
    │       ├── GatewayUnavailable  its 502/503/504 and throttles 429/500 (+ UnavailableError)
    │       └── GatewayRejected     its 400/413/422 (+ InvalidRequest)
    ├── HeldError               acquired: false, or acquire()'s wait ran out; .expires_at and
    │   │                       .retry_after when the service says
    │   └── AcquireTimeout      a grant answered after acquire() stopped waiting (it was released)
    ├── TransportError          no answer: connection failed, timed out, malformed response
    ├── LeaseLostError          the lease was lost; .reason says why
    ├── LeaseExpired            a reason: no renewal succeeded before the local deadline
    ├── LeaseReleased           check()/renew() on a lease this client released
    ├── FencedError             the protected resource refused a write: its fence holds a newer
    │                           fencing token (ft288_locks.fence)
    └── SigningError            SigV4 cannot be set up (no region, no credentials)
        └── SigV4Unavailable    signing was asked for but botocore is not installed

The names before the family of issue 16 still work, as deprecated aliases of
the same classes (a DeprecationWarning when used): Held, LeaseLost, StaleToken,
Forbidden, NotFound, ServiceUnavailable, ValidationFailed.
"""

from __future__ import annotations

import datetime as _dt
import warnings
from typing import Any, List, Mapping, Optional

PROBLEM_TYPE_BASE = "https://ft288.dev/problems/"


class LockError(Exception):
    """Base class of every exception of this package."""


class InvalidRequest(LockError, ValueError):
    """The request is invalid: rejected by the client before it was sent, or
    answered 400, 413 or 422 by the service (then it is also a ProblemError)."""


class FieldError:
    """One invalid field of a validation-failed problem."""

    __slots__ = ("field", "detail")

    def __init__(self, field: str, detail: str) -> None:
        self.field = field
        self.detail = detail

    def __repr__(self) -> str:
        return f"FieldError(field={self.field!r}, detail={self.detail!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FieldError) and (self.field, self.detail) == (other.field, other.detail)

    def __hash__(self) -> int:
        return hash((self.field, self.detail))


class ProblemError(LockError):
    """An error answer: an RFC 9457 problem document of the lock service, or the
    bare ``{"message": ...}`` API Gateway itself answers with (then only
    ``status`` and ``title`` are set and the exception is a GatewayError)."""

    def __init__(
        self,
        status: int,
        type: str = "",
        title: str = "",
        detail: str = "",
        instance: str = "",
        errors: Optional[List[FieldError]] = None,
        retry_after: Optional[float] = None,
        force_released: bool = False,
        current: Any = None,
    ) -> None:
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail
        self.instance = instance
        self.errors: List[FieldError] = list(errors or [])
        self.retry_after = retry_after
        self.force_released = force_released
        """True on the 404 answer to a renewal or release of a lease that an
        operator force released (the problem's ``force_released`` member)."""
        self.current = current
        """On the 409 answer to a force release of a lease that is not the
        one meant: the lease that blocks the lock (the problem's ``current``,
        an AdminLock); None otherwise."""
        self.current_permit: Any = None
        """On the 409 answer to force_release_permit() of a permit that is
        not the one meant: the permit that keeps the slot (an AdminPermit);
        None otherwise."""
        self.current_rw_lease: Any = None
        """On the 409 answer to force_release_rw() of a lease that is not the
        one meant: the read/write lock's lease that keeps the writer's place
        or the reader's slot (an AdminRWLease); None otherwise."""
        super().__init__(self._message())

    @property
    def slug(self) -> str:
        """The problem's slug ("not-found", ...), or "" when ``type`` is not
        one of the lock service's problem types."""
        if self.type.startswith(PROBLEM_TYPE_BASE):
            return self.type[len(PROBLEM_TYPE_BASE):]
        return ""

    @property
    def temporary(self) -> bool:
        """Whether the same request may succeed later: 5xx, 429 (API
        Gateway's throttle answers, 429 and 500 ``{"message"}``, included),
        408. The service's own 500 ``internal`` problem (a setup error) is
        not."""
        if self.slug == "internal":
            return False
        return self.status >= 500 or self.status in (408, 429)

    def _message(self) -> str:
        msg = str(self.status)
        if self.title:
            msg += " " + self.title
        if self.detail:
            msg += ": " + self.detail
        if self.errors:
            msg += " (" + "; ".join(f"{e.field}: {e.detail}" for e in self.errors) + ")"
        return msg


class NotFoundError(ProblemError):
    """404 not-found: there is no live lease (never taken, released, expired, or
    force released by an operator: then ``force_released`` is True)."""


class ForbiddenError(ProblemError):
    """403 forbidden: a live lease exists but belongs to another owner (or, with
    IAM auth, another principal)."""


class StaleTokenError(ProblemError):
    """409 stale-token: the owner matches but the fencing token does not; a newer
    lease of the same owner replaced the one the caller holds. For a force
    release with a fencing token, the lease that blocks the lock is not the one
    meant: ``current`` is that lease (an AdminLock)."""


class PermitsMismatchError(ProblemError):
    """409 permits-mismatch: a semaphore acquire asked for another number of
    permits than the semaphore has while some permit is held; ``permits`` is
    the semaphore's. Every acquirer must give the same number. Not
    FullError: the semaphore may have free permits. Not retried."""

    permits: Optional[int] = None


class ValidationError(ProblemError, InvalidRequest):
    """422 validation-failed; ``errors`` lists the invalid fields."""


class InvalidJSON(ProblemError, InvalidRequest):
    """400 invalid-json: the body is not one JSON object."""


class PayloadTooLarge(ProblemError, InvalidRequest):
    """413 payload-too-large: the body is over 16 KiB."""


class UnavailableError(ProblemError):
    """503 service-unavailable (or a 502/504 of the gateway): the service could
    not decide. ``retry_after`` is the Retry-After delay in seconds, if given."""


class InternalError(ProblemError):
    """500 internal: a failure the service logged but does not describe (a
    setup error, such as a missing table). Not retried."""


class GatewayError(ProblemError):
    """An answer of API Gateway itself, not of the lock service: ``{"message":
    "Forbidden"}`` for a missing or bad signature, ``Not Found`` for a wrong
    URL, ``Too Many Requests`` when throttled. It never means "no lease" or
    "held by another"."""


class GatewayUnavailable(GatewayError, UnavailableError):
    """A 502, 503 or 504 of the gateway, or its throttle answers: 429 ``{"message":
    "Too Many Requests"}`` for a throttled route, 500 ``{"message": "Internal
    Server Error"}`` for a throttled function. Retried with backoff."""


class GatewayRejected(GatewayError, InvalidRequest):
    """A 400, 413 or 422 of the gateway."""


_BY_SLUG = {
    "not-found": NotFoundError,
    "forbidden": ForbiddenError,
    "stale-token": StaleTokenError,
    "permits-mismatch": PermitsMismatchError,
    "validation-failed": ValidationError,
    "invalid-json": InvalidJSON,
    "payload-too-large": PayloadTooLarge,
    "service-unavailable": UnavailableError,
    "internal": InternalError,
}


def problem_from_answer(status: int, doc: Any, retry_after: Optional[float], reason: str) -> ProblemError:
    """The exception for an error answer with JSON body ``doc`` (None when the
    body was not JSON); ``reason`` is the status text, used when there is no
    message at all."""
    if isinstance(doc, Mapping) and (_str(doc.get("type")) or _str(doc.get("title"))):
        typ = _str(doc.get("type"))
        cls = ProblemError
        if typ.startswith(PROBLEM_TYPE_BASE):
            cls = _BY_SLUG.get(typ[len(PROBLEM_TYPE_BASE):], ProblemError)
        errors = []
        raw = doc.get("errors")
        if isinstance(raw, list):
            for e in raw:
                if isinstance(e, Mapping):
                    errors.append(FieldError(_str(e.get("field")), _str(e.get("detail"))))
        err = cls(
            status,
            type=typ,
            title=_str(doc.get("title")),
            detail=_str(doc.get("detail")),
            instance=_str(doc.get("instance")),
            errors=errors,
            retry_after=retry_after,
            force_released=doc.get("force_released") is True,
        )
        if isinstance(err, PermitsMismatchError) and type(doc.get("permits")) is int:
            err.permits = doc["permits"]
        # A waiting round's 503 may carry the waiter's place in the queue
        # (its queue write may have landed): the next round reclaims it.
        attach_queue_ticket(err, doc)
        return err
    title = _str(doc.get("message")) if isinstance(doc, Mapping) else ""
    cls = GatewayError
    if status in (429, 500, 502, 503, 504):
        cls = GatewayUnavailable
    elif status in (400, 413, 422):
        cls = GatewayRejected
    err = cls(status, title=title or reason, retry_after=retry_after)
    err._json_message = isinstance(doc, Mapping) and isinstance(doc.get("message"), str)  # type: ignore[attr-defined]
    return err


def attach_queue_ticket(err: BaseException, doc: Mapping[str, Any]) -> None:
    """Sets err's ``_queue_ticket`` to the answer doc's queue_ticket (None:
    no place), the place a waiting round's next round brings back."""
    ticket = doc.get("queue_ticket")
    err._queue_ticket = ticket if isinstance(ticket, str) and ticket else None  # type: ignore[attr-defined]


def no_wait_route(e: BaseException) -> bool:
    """Whether e is API Gateway's own 404 ``{"message": ...}``, its answer for
    a route it does not have (a stack without the waiting routes), and not
    the service's problem+json not-found."""
    return isinstance(e, GatewayError) and e.status == 404 and getattr(e, "_json_message", False)


def _str(v: Any) -> str:
    return v if isinstance(v, str) else ""


class HeldError(LockError):
    """The lock is held by another owner (``acquired: false``), also when
    acquire()'s wait ran out.

    ``expires_at`` is when the holder's lease ends by the service's clock (the
    holder may renew it), ``retry_after`` the service's advice in seconds;
    either is None when the service did not say (the local runner says
    neither). ``waited`` is how long acquire() waited, 0 for try_acquire()."""

    def __init__(
        self,
        resource: str,
        expires_at: Optional[_dt.datetime] = None,
        retry_after: Optional[float] = None,
        waited: float = 0.0,
        message: Optional[str] = None,
    ) -> None:
        self.resource = resource
        self.expires_at = expires_at
        self.retry_after = retry_after
        self.waited = waited
        if message is None:
            message = f"lock {resource!r} is held by another owner"
            if expires_at is not None:
                message += " until " + expires_at.isoformat()
            if retry_after is not None:
                message += f" (retry after {retry_after:g} s)"
            if waited > 0:
                message += f"; gave up after waiting {waited:.3g} s"
        super().__init__(message)


class FullError(HeldError):
    """Every permit of the semaphore is held by another owner (``acquired:
    false``), also when acquire_semaphore()'s wait ran out: the semaphore's
    HeldError (``resource`` is its name). ``free_at`` (also ``expires_at``)
    is the earliest time a permit comes free by the service's clock; None
    when the service did not say: the permits it saw free were taken
    meanwhile, and trying again at once may succeed. A semaphore with another
    number of permits is PermitsMismatchError instead."""

    def __init__(
        self,
        name: str,
        free_at: Optional[_dt.datetime] = None,
        retry_after: Optional[float] = None,
        waited: float = 0.0,
    ) -> None:
        message = f"semaphore {name!r} is full: every permit is held by another owner"
        if free_at is not None:
            message += " until " + free_at.isoformat()
        if retry_after is not None:
            message += f" (retry after {retry_after:g} s)"
        if waited > 0:
            message += f"; gave up after waiting {waited:.3g} s"
        super().__init__(name, free_at, retry_after, waited, message)
        self.free_at = free_at


class AcquireTimeout(HeldError, TimeoutError):
    """acquire() stopped waiting while a request was in flight and the answer
    that came later was a grant; the client released that grant again. A
    HeldError, as every acquire whose wait ran out without a lease."""

    def __init__(self, resource: str, fencing_token: int, waited: float) -> None:
        self.fencing_token = fencing_token
        super().__init__(
            resource,
            waited=waited,
            message=(
                f"acquire {resource!r}: the grant (fencing token {fencing_token}) arrived after the wait "
                f"ran out ({waited:.3g} s); released it"
            ),
        )


class TransportError(LockError):
    """No usable answer: the connection failed or timed out, or the response
    was malformed. ``maybe_sent`` is False only when the request certainly did
    not reach the service (the connection was refused or failed before the
    whole request was written, credentials unavailable)."""

    def __init__(self, message: str, maybe_sent: bool = True) -> None:
        self.maybe_sent = maybe_sent
        super().__init__(message)


class LeaseExpired(LockError):
    """No renewal succeeded before the lease's local deadline (the service was
    unreachable or slow, or nobody renewed). A reason of LeaseLostError."""

    def __init__(self, message: str = "no successful renewal before the lease's local deadline") -> None:
        super().__init__(message)


class LeaseLostError(LockError):
    """The lease is lost: the client can no longer be sure it holds the lock.

    ``reason`` is the cause: LeaseExpired, or the refusal of a renewal or of
    the release (NotFoundError, ForbiddenError, StaleTokenError, or another
    answer renewing cannot get past). ``force_released`` is True, and the message says so,
    when the service said an operator force released the lease."""

    def __init__(self, resource: str, fencing_token: int, reason: BaseException, slot: Optional[int] = None,
                 mode: Optional[str] = None) -> None:
        self.resource = resource
        self.fencing_token = fencing_token
        self.reason = reason
        self.slot = slot
        """The permit's slot when the lease was a semaphore's permit (``resource``
        is then its name), or a reader's of a read/write lock; None for a lock."""
        self.mode = mode
        """The lease's mode ("read" or "write") when it was a read/write lock's; None otherwise."""
        self.force_released = isinstance(reason, ProblemError) and reason.force_released
        why = f"it was force released by an operator ({reason})" if self.force_released else str(reason)
        if mode == "read":
            what = f"read lease in slot {slot} of {resource!r}"
        elif mode == "write":
            what = f"write lease on {resource!r}"
        else:
            what = f"lease on {resource!r}" if slot is None else f"permit in slot {slot} of semaphore {resource!r}"
        super().__init__(f"{what} (fencing token {fencing_token}) lost: {why}")


class LeaseReleased(LockError):
    """The lease was released by this client; it cannot be checked or renewed."""


class FencedError(LockError):
    """The protected resource refused a write: the fence it stores holds a
    newer fencing token than ``token`` (a newer holder of the lock wrote
    first), so this holder's lease is gone. Raised by ft288_locks.fence's
    helpers (sql_fence: no row changed); map DynamoDB's
    ConditionalCheckFailedException on a fenced write to it if you like."""

    def __init__(self, token: int, message: Optional[str] = None) -> None:
        self.token = token
        super().__init__(message or f"fenced off: a write with a newer fencing token than {token} came first")


class SigningError(LockError):
    """SigV4 signing cannot be set up: no region or no credentials."""


class SigV4Unavailable(SigningError, ImportError):
    """Signing was asked for, but botocore is not installed
    (``pip install 'ft288-locks[sigv4]'``; every AWS Lambda Python runtime has it)."""


# The names before the family of issue 16: the same classes, deprecated.
DEPRECATED_ALIASES = {
    "Held": "HeldError",
    "LeaseLost": "LeaseLostError",
    "StaleToken": "StaleTokenError",
    "Forbidden": "ForbiddenError",
    "NotFound": "NotFoundError",
    "ServiceUnavailable": "UnavailableError",
    "ValidationFailed": "ValidationError",
}


def deprecated_alias(module: str, name: str) -> Any:
    """The class an old name stands for, with a DeprecationWarning; raises
    AttributeError for any other name."""
    new = DEPRECATED_ALIASES.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(f"{module}.{name} is deprecated: use {new}, the same class", DeprecationWarning, stacklevel=3)
    return globals()[new]


def __getattr__(name: str) -> Any:
    return deprecated_alias(__name__, name)
