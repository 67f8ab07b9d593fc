"""What the service reports: a lease (Lock), a lease as the admin routes show
it (AdminLock), a page of the listing, and the outcome of a force release.
A malformed one is a TransportError."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, List, Optional

from ._http import parse_time
from .errors import TransportError


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
    def _parse(cls, doc: Any) -> "Lock":
        return cls(**_lock_fields(doc))


@dataclass(frozen=True)
class AdminLock(Lock):
    """A lease as the admin routes show it: the Lock and the IAM principal
    bound to it ("" without IAM auth). A lease inside its lock-delay has an
    ``expires_at`` in the past."""

    principal: str = ""

    @classmethod
    def _parse(cls, doc: Any) -> "AdminLock":
        principal = doc.get("principal", "") if isinstance(doc, dict) else None
        if not isinstance(principal, str):
            raise ValueError(f"malformed lock: {doc!r:.200}")
        return cls(**_lock_fields(doc), principal=principal)


@dataclass(frozen=True)
class LockPage:
    """One page of Client.list(): its leases (in no order of names) and, when
    the listing goes on, the cursor of the next page (None at the end)."""

    locks: List[AdminLock] = field(default_factory=list)
    cursor: Optional[str] = None


@dataclass(frozen=True)
class ForceReleased:
    """What Client.force_release() did: the lease it ended (as it was), the
    reason the service recorded, whether the lock was freed at once, and
    ``free_at``, when others may take the lock: now for an immediate force
    release or a lease without lock-delay, else the end of its lock-delay
    (None from a service that does not say, which frees it at once)."""

    ended: AdminLock
    reason: str
    immediate: bool
    free_at: Optional[_dt.datetime]


@dataclass(frozen=True)
class WatchResult:
    """One answer of Client.watch(): the lock's state once it differs from
    the index asked with, or when the wait ran out.

    ``index`` identifies the state (pass it to the next watch): 0 for a lock
    never taken, else 2 × the latest fencing token, plus 1 once that lease
    has ended (released, expired, force released); it only grows, and a
    renewal leaves it. ``changed``: it differs from the index asked with.
    ``fencing_token`` is the latest lease's token, live or not (None for a
    lock never taken); ``lock`` the live lease, None when there is none."""

    resource: str
    index: int
    changed: bool
    fencing_token: Optional[int] = None
    lock: Optional[Lock] = None

    @classmethod
    def _parse(cls, doc: Any) -> "WatchResult":
        if isinstance(doc, dict):
            resource, index, changed = doc.get("resource"), doc.get("index"), doc.get("changed")
            token, lock = doc.get("fencing_token"), doc.get("lock")
            if (
                isinstance(resource, str) and resource
                and type(index) is int and index >= 0 and isinstance(changed, bool)
                and (token is None or (type(token) is int and token > 0))
            ):
                return cls(resource, index, changed, token, None if lock is None else Lock._parse(lock))
        raise ValueError(f"malformed watch answer: {doc!r:.200}")


def parse_watch(doc: Any, what: str) -> WatchResult:
    """doc parsed as a WatchResult; a TransportError when malformed."""
    try:
        return WatchResult._parse(doc)
    except ValueError:
        raise TransportError(f"{what}: malformed response: {doc!r:.200}") from None


def _lock_fields(doc: Any) -> dict:
    if isinstance(doc, dict):
        token = doc.get("fencing_token")
        delay = doc.get("lock_delay_seconds", 0)
        acquired_at = parse_time(doc.get("acquired_at"))
        expires_at = parse_time(doc.get("expires_at"))
        resource, owner = doc.get("resource"), doc.get("owner")
        if (
            type(token) is int and token > 0
            and isinstance(resource, str) and resource and isinstance(owner, str) and owner
            and acquired_at is not None and expires_at is not None
            and type(delay) is int and delay >= 0
        ):
            return dict(resource=resource, owner=owner, fencing_token=token, acquired_at=acquired_at,
                        expires_at=expires_at, lock_delay_seconds=delay)
    raise ValueError(f"malformed lock: {doc!r:.200}")


def parse_lock(cls: Any, doc: Any, what: str) -> Any:
    """doc parsed as cls (Lock or AdminLock); a TransportError when malformed."""
    try:
        return cls._parse(doc)
    except ValueError:
        raise TransportError(f"{what}: malformed lock in response: {doc!r:.200}") from None
