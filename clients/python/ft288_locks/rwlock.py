"""Read/write locks: a name held by up to MAX_READERS readers or by one writer
(docs/design.md, "Read/write locks"). Each grant is a Lease of its own,
renewed and released by mode, slot (a reader's) and token."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any, List, Optional, Protocol

from ._model import Lock, _lock_fields, _queue
from ._retry import Backoff
from .errors import InvalidRequest, TransportError
from .lease import Lease

MAX_READERS = 64
"""The largest number of readers a read/write lock holds at once (the service's bound)."""

READ = "read"
"""A reader's lease: shared with other readers, in a slot of its own."""
WRITE = "write"
"""The writer's lease: it excludes readers and writers."""


@dataclass(frozen=True)
class RWLeaseInfo:
    """A live lease of a read/write lock as the service reports it: its
    ``mode`` ("read" or "write"), a reader's ``slot`` (None for the writer),
    owner and fencing token, strictly greater than every token issued before
    for the name, read or write. Its times are the service's clock:
    informational only."""

    name: str
    mode: str
    slot: Optional[int]
    owner: str
    fencing_token: int
    acquired_at: _dt.datetime
    expires_at: _dt.datetime
    lock_delay_seconds: int = 0

    def _as_lock(self) -> Lock:
        return Lock(self.name, self.owner, self.fencing_token, self.acquired_at, self.expires_at, self.lock_delay_seconds)


@dataclass(frozen=True)
class RWQueueEntry:
    """A waiter of a read/write lock: the lease it asks for, its owner, and
    when its place lapses unless kept."""

    mode: str
    owner: str
    until: _dt.datetime


@dataclass(frozen=True)
class RWStatus:
    """A read/write lock's state: the live ``writer`` (None when none) or
    ``readers``, the waiters in arrival order, and the latest grant's token
    (None: never taken)."""

    name: str
    writer: Optional[RWLeaseInfo]
    readers: List[RWLeaseInfo] = field(default_factory=list)
    queue: List[RWQueueEntry] = field(default_factory=list)
    fencing_token: Optional[int] = None


@dataclass(frozen=True)
class AdminRWLease(RWLeaseInfo):
    """A read/write lock's lease as the admin routes show it: the lease, the
    IAM ``principal`` bound to it ("" without IAM auth) and
    ``force_released`` (an operator ended it; listed while its lock-delay
    keeps the place). A lease inside its lock-delay has an ``expires_at`` in
    the past."""

    principal: str = ""
    force_released: bool = False


@dataclass(frozen=True)
class AdminRWQueueEntry:
    """A waiter of a read/write lock as the admin listing shows it: the
    lease it asks for, its owner, its IAM principal ("" without IAM auth),
    when it joined (None for a place taken before the service recorded it),
    and when the place lapses unless kept."""

    mode: str
    owner: str
    until: _dt.datetime
    principal: str = ""
    joined_at: Optional[_dt.datetime] = None


@dataclass(frozen=True)
class AdminRWLock:
    """One read/write lock of Client.list_rwlocks(): its ``writer`` (None
    when none) or ``readers`` (each in its slot), its waiters in queue
    order, and the latest grant's token, read or write, live or not."""

    name: str
    writer: Optional[AdminRWLease]
    readers: List[AdminRWLease] = field(default_factory=list)
    queue: List[AdminRWQueueEntry] = field(default_factory=list)
    fencing_token: int = 0


@dataclass(frozen=True)
class RWLockPage:
    """One page of Client.list_rwlocks(): its read/write locks, in no order
    of names, and the cursor of the next page (None at the end). A page may
    be short, even empty, and still have a cursor."""

    rwlocks: List[AdminRWLock] = field(default_factory=list)
    cursor: Optional[str] = None


@dataclass(frozen=True)
class RWWatchResult:
    """One answer of Client.watch_rw(). ``index`` is 0 for a name never
    taken, else 2 × the latest token + 1 − the number of live leases: it
    grows at every grant and every end, read or write (a renewal is no
    change); pass it to the next watch. ``fencing_token`` is the latest
    grant's, live or not (None: never taken)."""

    name: str
    index: int
    changed: bool
    writer: Optional[RWLeaseInfo] = None
    readers: List[RWLeaseInfo] = field(default_factory=list)
    fencing_token: Optional[int] = None


@dataclass(frozen=True)
class RWForceReleased:
    """What Client.force_release_rw() did: the lease it ended (as it was),
    the reason recorded, whether its place was freed at once, and
    ``free_at``, when others may take it."""

    ended: AdminRWLease
    reason: str
    immediate: bool
    free_at: Optional[_dt.datetime]


def parse_rw_lease(doc: Any, what: str, name: str, mode: Optional[str] = None, cls: Any = RWLeaseInfo) -> Any:
    """doc parsed as an RWLeaseInfo (or cls, AdminRWLease) of name (of
    mode, when given); a TransportError when malformed."""
    try:
        if not isinstance(doc, dict):
            raise ValueError
        fields = _lock_fields({**doc, "resource": doc.get("name")})
        m, slot = doc.get("mode"), doc.get("slot")
        if m not in (READ, WRITE) or (m == READ and not (type(slot) is int and 0 <= slot < MAX_READERS)):
            raise ValueError
        info = cls(name=fields.pop("resource"), mode=m, slot=slot if m == READ else None, **fields, **_admin_fields(cls, doc))
    except ValueError:
        raise TransportError(f"{what}: malformed lease in response: {doc!r:.200}") from None
    if info.name != name or (mode is not None and info.mode != mode):
        raise TransportError(f"{what}: the response is about the {info.mode} lease of {info.name!r}")
    return info


def parse_rw_status(doc: Any, name: str, what: str) -> RWStatus:
    """A status answer of name as an RWStatus; a TransportError when malformed."""
    from ._http import parse_time

    if not isinstance(doc, dict) or not isinstance(doc.get("readers"), list) or not isinstance(doc.get("queue"), list):
        raise TransportError(f"{what}: malformed response: {doc!r:.200}")
    writer, readers = _leases(doc, name, what, RWLeaseInfo)
    queue = []
    for e in doc["queue"]:
        until = parse_time(e.get("until")) if isinstance(e, dict) else None
        if until is None or e.get("mode") not in (READ, WRITE) or not isinstance(e.get("owner"), str):
            raise TransportError(f"{what}: malformed queue entry: {e!r:.200}")
        queue.append(RWQueueEntry(e["mode"], e["owner"], until))
    token = doc.get("fencing_token")
    if token is not None and (type(token) is not int or token < 1):
        raise TransportError(f"{what}: malformed fencing_token: {token!r:.200}")
    return RWStatus(name, writer, readers, queue, token)


def _admin_fields(cls: Any, doc: dict) -> dict:
    """An AdminRWLease's own fields of doc (none for an RWLeaseInfo);
    ValueError when malformed."""
    if cls is not AdminRWLease:
        return {}
    principal = doc.get("principal", "")
    if not isinstance(principal, str):
        raise ValueError
    return {"principal": principal, "force_released": doc.get("force_released") is True}


def _leases(doc: dict, name: str, what: str, cls: Any) -> tuple:
    """The writer (None: none) and the readers of a status, watch or listing
    row of name, as cls; a TransportError when malformed."""
    readers = doc.get("readers", [])
    if not isinstance(readers, list):
        raise TransportError(f"{what}: malformed response: {doc!r:.200}")
    writer = None if doc.get("writer") is None else parse_rw_lease(doc["writer"], what, name, WRITE, cls)
    return writer, [parse_rw_lease(r, what, name, READ, cls) for r in readers]


def parse_rw_watch(doc: Any, name: str, what: str) -> RWWatchResult:
    """A watch answer of name as an RWWatchResult; a TransportError when
    malformed."""
    if not isinstance(doc, dict) or doc.get("name", name) != name:
        raise TransportError(f"{what}: malformed response: {doc!r:.200}")
    writer, readers = _leases(doc, name, what, RWLeaseInfo)
    index, changed, token = doc.get("index"), doc.get("changed"), doc.get("fencing_token")
    if type(index) is not int or index < 0 or not isinstance(changed, bool) or \
            (token is not None and (type(token) is not int or token < 1)):
        raise TransportError(f"{what}: malformed response: {doc!r:.200}")
    return RWWatchResult(name, index, changed, writer, readers, token)


def parse_admin_rwlock(doc: Any, what: str) -> AdminRWLock:
    """A row of the read/write lock listing; a TransportError when malformed."""
    name = doc.get("name") if isinstance(doc, dict) else None
    token = doc.get("fencing_token") if isinstance(doc, dict) else None
    if not isinstance(name, str) or not name or type(token) is not int or token < 0:
        raise TransportError(f"{what}: malformed read/write lock in response: {doc!r:.200}")
    writer, readers = _leases(doc, name, what, AdminRWLease)
    # The lock's and the semaphore's queue entries, each with the lease it asks for.
    try:
        entries = _queue(doc)
    except ValueError as e:
        raise TransportError(f"{what}: {e}") from None
    modes = [e.get("mode") for e in doc.get("queue", [])]
    if any(m not in (READ, WRITE) for m in modes):
        raise TransportError(f"{what}: malformed queue entry mode in: {doc.get('queue')!r:.200}")
    queue = [AdminRWQueueEntry(m, e.owner, e.until, e.principal, e.joined_at) for m, e in zip(modes, entries)]
    return AdminRWLock(name, writer, readers, queue, token)


def check_mode(mode: Any, slot: Any) -> Optional[int]:
    """The checked slot of a lease of mode: a reader's 0 to MAX_READERS − 1,
    None for the writer."""
    if mode not in (READ, WRITE):
        raise InvalidRequest(f"mode {mode!r}: want 'read' or 'write'")
    if mode == WRITE:
        return None
    if type(slot) is not int or not 0 <= slot < MAX_READERS:
        raise InvalidRequest(f"slot {slot!r}: want a whole number from 0 to {MAX_READERS - 1}")
    return slot


class RWHost(Protocol):
    """What a read/write lock's lease needs of its client (Client is one)."""

    timeout: float
    backoff: Backoff
    lease_margin: Optional[float]

    def _renew_rw(self, name: str, owner: str, mode: str, slot: Optional[int], ttl: int, token: Optional[int],
                  timeout: float) -> RWLeaseInfo: ...

    def _release_rw(self, name: str, owner: str, mode: str, slot: Optional[int], token: Optional[int], timeout: float) -> None: ...


class _RWHost:
    """An RWLease's LeaseHost: its client's settings, and the renew and
    release of its mode and slot."""

    def __init__(self, client: RWHost, mode: str, slot: Optional[int]) -> None:
        self._client, self._mode, self._slot = client, mode, slot

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
        return self._client._renew_rw(resource, owner, self._mode, self._slot, ttl, token, timeout)._as_lock()

    def _release(self, resource: str, owner: str, token: Optional[int], timeout: float) -> None:
        self._client._release_rw(resource, owner, self._mode, self._slot, token, timeout)


class RWLease(Lease):
    """A reader's or the writer's lease of a read/write lock held by this
    client; made by Client.try_acquire_read/try_acquire_write,
    acquire_read/acquire_write, read_lock and write_lock.

    A Lease (keep-alive thread, ``held``, ``check()`` by the clock,
    ``release()``, a context manager) renewed and released by mode, slot and
    token. Its fencing token is larger than every earlier token of the name,
    read or write: a resource that keeps the largest writer's token it saw
    refuses a writer with a smaller one, and a reader whose token is below it
    (a writer came after that reader's grant)."""

    def __init__(self, client: RWHost, info: RWLeaseInfo, ttl: int, t0: float, keepalive: bool = True) -> None:
        self._mode = info.mode
        self._slot = info.slot
        super().__init__(_RWHost(client, info.mode, info.slot), info._as_lock(), ttl, t0, keepalive)

    @property
    def name(self) -> str:
        """The read/write lock's name (as ``resource``)."""
        return self.resource

    @property
    def mode(self) -> str:
        """"read" or "write"."""
        return self._mode

    @property
    def slot(self) -> Optional[int]:
        """A reader's slot, 0 to 63; None for the writer."""
        return self._slot

    @property
    def info(self) -> RWLeaseInfo:
        """The lease as the service last reported it (grant or latest renewal)."""
        lock = self.lock
        return RWLeaseInfo(lock.resource, self._mode, self._slot, lock.owner, lock.fencing_token, lock.acquired_at,
                           lock.expires_at, lock.lock_delay_seconds)

    def __repr__(self) -> str:
        return (
            f"RWLease(name={self.name!r}, mode={self.mode!r}, slot={self.slot}, owner={self.owner!r}, "
            f"fencing_token={self.fencing_token}, held={self.held})"
        )
