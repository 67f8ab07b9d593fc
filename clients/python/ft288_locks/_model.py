"""What the service reports: a lease (Lock), a lease as the admin routes show
it (AdminLock), a page of the listing, and the outcome of a force release.
A malformed one is a TransportError."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, List, Optional, Tuple

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
class QueueEntry:
    """A waiter's place in a queue, as the admin listings show it: its owner,
    its IAM principal ("" without IAM auth), when it joined (None for a place
    taken before the service recorded it), and when the place lapses unless
    the waiter's next round keeps it."""

    owner: str
    until: _dt.datetime
    principal: str = ""
    joined_at: Optional[_dt.datetime] = None


def _queue(doc: Any) -> Tuple[QueueEntry, ...]:
    """A listing row's queue (absent: none); ValueError when malformed."""
    raw = doc.get("queue", []) if isinstance(doc, dict) else None
    if not isinstance(raw, list):
        raise ValueError(f"malformed queue: {doc!r:.200}")
    out = []
    for e in raw:
        if not isinstance(e, dict):
            raise ValueError(f"malformed queue entry: {e!r:.200}")
        owner, principal, until = e.get("owner"), e.get("principal", ""), parse_time(e.get("until"))
        joined = parse_time(e["joined_at"]) if "joined_at" in e else None
        if not (isinstance(owner, str) and owner and isinstance(principal, str) and until is not None) or (
            "joined_at" in e and joined is None
        ):
            raise ValueError(f"malformed queue entry: {e!r:.200}")
        out.append(QueueEntry(owner=owner, until=until, principal=principal, joined_at=joined))
    return tuple(out)


@dataclass(frozen=True)
class AdminLock(Lock):
    """A lease as the admin routes show it: the Lock and the IAM principal
    bound to it ("" without IAM auth). A lease inside its lock-delay has an
    ``expires_at`` in the past. ``queue`` is the lock's waiters in queue
    order, in the listing only (empty otherwise). ``set_id`` is the lock set
    whose request granted the lease (LockSet.id), "" for a lease of its own."""

    principal: str = ""
    queue: Tuple[QueueEntry, ...] = ()
    set_id: str = ""

    @classmethod
    def _parse(cls, doc: Any) -> "AdminLock":
        principal = doc.get("principal", "") if isinstance(doc, dict) else None
        set_id = doc.get("set_id", "") if isinstance(doc, dict) else None
        if not isinstance(principal, str) or not isinstance(set_id, str):
            raise ValueError(f"malformed lock: {doc!r:.200}")
        return cls(**_lock_fields(doc), principal=principal, queue=_queue(doc), set_id=set_id)


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


@dataclass(frozen=True)
class PermitInfo:
    """A live permit of a semaphore as the service reports it: its ``slot``
    (0 to N−1), owner and fencing token, strictly greater than every token
    issued before for any permit of the semaphore. Its times are the
    service's clock: informational only."""

    name: str
    slot: int
    owner: str
    fencing_token: int
    acquired_at: _dt.datetime
    expires_at: _dt.datetime
    lock_delay_seconds: int = 0

    @classmethod
    def _parse(cls, doc: Any) -> "PermitInfo":
        return cls(**_permit_fields(doc))

    def _as_lock(self) -> Lock:
        """The permit as the Lock of its Lease (``resource`` is the name)."""
        return Lock(self.name, self.owner, self.fencing_token, self.acquired_at, self.expires_at, self.lock_delay_seconds)


@dataclass(frozen=True)
class AdminPermit(PermitInfo):
    """A permit as the admin routes show it: the permit, the semaphore's
    number of ``permits``, the IAM ``principal`` bound to it ("" without IAM
    auth) and ``force_released`` (an operator ended it; listed while its
    lock-delay keeps the slot). A permit inside its lock-delay has an
    ``expires_at`` in the past."""

    permits: int = 0
    principal: str = ""
    force_released: bool = False
    queue: Tuple[QueueEntry, ...] = ()
    """The semaphore's waiters in queue order, on its first permit listed
    only (empty otherwise)."""

    @classmethod
    def _parse(cls, doc: Any) -> "AdminPermit":
        fields = _permit_fields(doc)
        permits, principal = doc.get("permits"), doc.get("principal", "")
        if type(permits) is not int or permits < 1 or not isinstance(principal, str):
            raise ValueError(f"malformed permit: {doc!r:.200}")
        return cls(**fields, permits=permits, principal=principal, force_released=doc.get("force_released") is True,
                   queue=_queue(doc))


@dataclass(frozen=True)
class SemaphoreStatus:
    """Client.semaphore_status(): the semaphore's number of permits (None
    when it has no record: never taken, or garbage collected) and its live
    permits, by slot (none is not an error)."""

    name: str
    permits: Optional[int]
    holders: List[PermitInfo] = field(default_factory=list)


@dataclass(frozen=True)
class SemaphoreWatchResult:
    """One answer of Client.watch_semaphore(). ``index`` is 0 for a semaphore
    never taken, else 2 × the latest token + 1 − the number of live permits:
    it grows at every grant and every end of a permit (a renewal is no
    change); pass it to the next watch. ``fencing_token`` is the latest
    permit's, live or not (None: never taken)."""

    name: str
    index: int
    changed: bool
    permits: Optional[int] = None
    fencing_token: Optional[int] = None
    holders: List[PermitInfo] = field(default_factory=list)


@dataclass(frozen=True)
class PermitPage:
    """One page of Client.list_semaphores(): its permits (a semaphore's are
    never split over two pages) and the cursor of the next page (None at
    the end)."""

    holders: List[AdminPermit] = field(default_factory=list)
    cursor: Optional[str] = None


@dataclass(frozen=True)
class PermitForceReleased:
    """What Client.force_release_permit() did: the permit it ended (as it
    was), the reason recorded, whether the slot was freed at once, and
    ``free_at``, when others may take the slot."""

    ended: AdminPermit
    reason: str
    immediate: bool
    free_at: Optional[_dt.datetime]


def _permit_fields(doc: Any) -> dict:
    if isinstance(doc, dict):
        slot = doc.get("slot")
        try:
            lock = _lock_fields({**doc, "resource": doc.get("name")})
        except ValueError:
            lock = None
        if lock is not None and type(slot) is int and slot >= 0:
            return dict(name=lock.pop("resource"), slot=slot, **lock)
    raise ValueError(f"malformed permit: {doc!r:.200}")


def parse_permit(cls: Any, doc: Any, what: str, name: Optional[str] = None) -> Any:
    """doc parsed as cls (PermitInfo or AdminPermit) of the semaphore name
    (any when None); a TransportError when malformed."""
    try:
        p = cls._parse(doc)
    except ValueError:
        raise TransportError(f"{what}: malformed permit in response: {doc!r:.200}") from None
    if name is not None and p.name != name:
        raise TransportError(f"{what}: the response is about semaphore {p.name!r}")
    return p


def parse_semaphore(doc: Any, name: str, what: str) -> Tuple[Optional[int], List[PermitInfo]]:
    """The permits and holders of a status or watch answer of name."""
    if not isinstance(doc, dict) or not isinstance(doc.get("holders"), list):
        raise TransportError(f"{what}: malformed response: {doc!r:.200}")
    permits = doc.get("permits")
    if permits is not None and (type(permits) is not int or permits < 1):
        raise TransportError(f"{what}: malformed permits: {permits!r:.200}")
    return permits, [parse_permit(PermitInfo, h, what, name) for h in doc["holders"]]
