"""The admin calls: list the held locks, force release one. For operators:
the local runner keeps the admin routes open; in AWS they exist only when
the stack names its administrators (docs/api.md, "Admin API")."""

from __future__ import annotations

import urllib.parse
from typing import Any, Callable, List, Optional, Tuple, TypeVar

from ._args import check_resource, check_slot, check_token, escape
from ._http import Response, parse_time
from ._model import AdminLock, AdminPermit, ForceReleased, LockPage, PermitForceReleased, PermitPage, parse_lock, parse_permit
from .errors import InvalidRequest, TransportError
from .rwlock import READ, AdminRWLease, AdminRWLock, RWForceReleased, RWLockPage, check_mode, parse_admin_rwlock, parse_rw_lease

MAX_LIST_LIMIT = 1000
"""The most leases one page of Client.list() may ask for."""

_R = TypeVar("_R")
_P = TypeVar("_P", LockPage, PermitPage, RWLockPage)


class AdminCalls:
    """Client's admin calls; Client supplies ``_send`` and ``timeout``."""

    timeout: float

    def _send(self, method: str, path: str, payload: Any, timeout: float, what: str) -> Tuple[Response, Any]:
        raise NotImplementedError

    def _page(self, what: str, route: str, field: str, prefix: str, limit: Optional[int], cursor: Optional[str],
              parse: Callable[[Any], _R], name_of: Callable[[_R], str]) -> Tuple[List[_R], Optional[str]]:
        """One page of the listing at route: its rows (the list under
        ``field``, each parsed and checked to be under ``prefix``) and the
        next page's cursor, None after the last."""
        _, doc = self._send("GET", _list_path(what, route, prefix, limit, cursor), None, self.timeout, what)
        if not isinstance(doc, dict) or not isinstance(doc.get(field, []), list):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        rows = [parse(d) for d in doc.get(field) or []]
        for row in rows:
            if not name_of(row).startswith(prefix):
                raise TransportError(f"{what}: the response lists {name_of(row)!r}, outside the prefix")
        next_cursor = doc.get("cursor")
        if next_cursor is not None and not isinstance(next_cursor, str):
            raise TransportError(f"{what}: malformed cursor: {next_cursor!r:.200}")
        return rows, next_cursor or None

    def list(self, prefix: str = "", *, limit: Optional[int] = None, cursor: Optional[str] = None) -> LockPage:
        """One page of the leases that keep others from their lock (live, or
        expired but inside their lock-delay) whose name starts with
        ``prefix``: at most ``limit`` (1–1000; None: the service's default,
        100). A page may be short, even empty, and still have a ``cursor``:
        pass it back for the next page, until it is None."""
        what = f"list {prefix!r}"
        locks, next_cursor = self._page(what, "/admin/locks", "locks", prefix, limit, cursor,
                                        lambda d: parse_lock(AdminLock, d, what), lambda lock: lock.resource)
        return LockPage(locks, next_cursor)

    def list_all(self, prefix: str = "") -> List[AdminLock]:
        """Every lease list() finds under ``prefix``, following the cursors
        (pages of 1000). Not a snapshot of one moment: each lease was blocking
        its lock when its page was read."""
        return _follow(lambda cursor: self.list(prefix, limit=MAX_LIST_LIMIT, cursor=cursor), lambda page: page.locks)

    def force_release(
        self,
        resource: str,
        reason: str,
        *,
        immediate: bool = False,
        fencing_token: Optional[int] = None,
    ) -> ForceReleased:
        """Ends the lease on ``resource`` whoever holds it, with ``reason``
        (1–500 bytes) for the audit log, and returns what it ended and
        ``free_at``. By default the lease's lock-delay is honoured: nobody
        may take the lock before ``free_at``; ``immediate=True`` frees it at
        once (for a holder known to be dead). With ``fencing_token``, only
        the lease with that token is ended: another one raises
        StaleTokenError whose ``current`` is the lease that blocks the lock.
        NotFoundError when no lease blocks it. Sent once: a force release
        whose outcome is unknown is better looked at (list()) than repeated."""
        what = f"force-release {resource!r}"
        resource = check_resource(resource)
        payload = _force_release_body(what, reason, immediate, fencing_token)
        _, doc = self._send("DELETE", "/admin/locks/" + escape(resource), payload, self.timeout, what)
        if not isinstance(doc, dict):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        ended = parse_lock(AdminLock, doc.get("ended"), what)
        if ended.resource != resource:
            raise TransportError(f"{what}: the response ended {ended.resource!r}")
        got_reason, got_immediate = doc.get("reason", reason), doc.get("immediate", immediate)
        if not isinstance(got_reason, str) or not isinstance(got_immediate, bool):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        return ForceReleased(ended, got_reason, got_immediate, parse_time(doc.get("free_at")))

    def list_semaphores(self, prefix: str = "", *, limit: Optional[int] = None, cursor: Optional[str] = None) -> PermitPage:
        """One page of the permits that keep their slot (live, or inside their
        lock-delay) of the semaphores whose name starts with ``prefix``.
        ``limit`` counts permits, but a page ends after the semaphore that
        reaches it. Follow ``cursor`` until it is None, or use
        list_all_semaphores()."""
        what = f"list semaphores {prefix!r}"
        holders, next_cursor = self._page(what, "/admin/semaphores", "holders", prefix, limit, cursor,
                                          lambda d: parse_permit(AdminPermit, d, what), lambda p: p.name)
        return PermitPage(holders, next_cursor)

    def list_all_semaphores(self, prefix: str = "") -> List[AdminPermit]:
        """Every permit list_semaphores() finds under ``prefix``, following the
        cursors."""
        return _follow(lambda cursor: self.list_semaphores(prefix, limit=MAX_LIST_LIMIT, cursor=cursor),
                       lambda page: page.holders)

    def force_release_permit(
        self,
        name: str,
        slot: int,
        reason: str,
        *,
        immediate: bool = False,
        fencing_token: Optional[int] = None,
    ) -> PermitForceReleased:
        """force_release() for the permit in ``slot`` of the semaphore
        ``name``: returns the permit it ended and ``free_at``. With
        ``fencing_token`` that is not the permit's it raises StaleTokenError
        whose ``current_permit`` is the permit that keeps the slot;
        NotFoundError when no permit keeps it. Sent once."""
        what = f"force-release semaphore {name!r} slot {slot!r}"
        name, slot = check_resource(name), check_slot(slot)
        payload = _force_release_body(what, reason, immediate, fencing_token)
        payload["slot"] = slot
        _, doc = self._send("DELETE", "/admin/semaphores/" + escape(name), payload, self.timeout, what)
        if not isinstance(doc, dict):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        ended = parse_permit(AdminPermit, doc.get("ended"), what, name)
        got_reason, got_immediate = doc.get("reason", reason), doc.get("immediate", immediate)
        if ended.slot != slot or not isinstance(got_reason, str) or not isinstance(got_immediate, bool):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        return PermitForceReleased(ended, got_reason, got_immediate, parse_time(doc.get("free_at")))


    def list_rwlocks(self, prefix: str = "", *, limit: Optional[int] = None, cursor: Optional[str] = None) -> RWLockPage:
        """One page of the read/write locks whose name starts with ``prefix``
        and that have a lease keeping others out (live, or inside its
        lock-delay) or a live waiter: each with its writer or readers, its
        waiters in queue order and its latest token. ``limit`` counts locks.
        Follow ``cursor`` until it is None, or use list_all_rwlocks()."""
        what = f"list read/write locks {prefix!r}"
        rwlocks, next_cursor = self._page(what, "/admin/rwlocks", "rwlocks", prefix, limit, cursor,
                                          lambda d: parse_admin_rwlock(d, what), lambda lock: lock.name)
        return RWLockPage(rwlocks, next_cursor)

    def list_all_rwlocks(self, prefix: str = "") -> List[AdminRWLock]:
        """Every read/write lock list_rwlocks() finds under ``prefix``,
        following the cursors."""
        return _follow(lambda cursor: self.list_rwlocks(prefix, limit=MAX_LIST_LIMIT, cursor=cursor),
                       lambda page: page.rwlocks)

    def force_release_rw(
        self,
        name: str,
        mode: str,
        slot: Optional[int],
        reason: str,
        *,
        immediate: bool = False,
        fencing_token: Optional[int] = None,
    ) -> RWForceReleased:
        """force_release() for one holder of the read/write lock ``name``,
        whoever holds it: the writer (``mode`` "write", ``slot`` None) or the
        reader in ``slot`` (``mode`` "read"); the other holders keep their
        leases. Returns the lease it ended and ``free_at``. With
        ``fencing_token`` that is not the lease's it raises StaleTokenError
        whose ``current_rw_lease`` is the lease that keeps the place;
        NotFoundError when no lease keeps it. Sent once."""
        what = f"force-release read/write lock {name!r} " + (f"reader in slot {slot!r}" if mode == READ else "writer")
        name = check_resource(name)
        checked = check_mode(mode, slot)
        if mode != READ and slot is not None:
            raise InvalidRequest(f"{what}: a writer has no slot")
        slot = checked
        payload = _force_release_body(what, reason, immediate, fencing_token)
        payload["mode"] = mode
        if slot is not None:
            payload["slot"] = slot
        _, doc = self._send("DELETE", "/admin/rwlocks/" + escape(name), payload, self.timeout, what)
        if not isinstance(doc, dict):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        ended = parse_rw_lease(doc.get("ended"), what, name, mode, AdminRWLease)
        got_reason, got_immediate = doc.get("reason", reason), doc.get("immediate", immediate)
        if ended.slot != slot or not isinstance(got_reason, str) or not isinstance(got_immediate, bool):
            raise TransportError(f"{what}: malformed response: {doc!r:.200}")
        return RWForceReleased(ended, got_reason, got_immediate, parse_time(doc.get("free_at")))

def _follow(page: Callable[[Optional[str]], _P], rows: Callable[[_P], List[_R]]) -> List[_R]:
    """The rows of every page, from the first (cursor None) on, following
    each page's cursor until it is None."""
    out: List[_R] = []
    cursor = None
    while True:
        p = page(cursor)
        out.extend(rows(p))
        if p.cursor is None:
            return out
        cursor = p.cursor


def _list_path(what: str, route: str, prefix: str, limit: Optional[int], cursor: Optional[str]) -> str:
    """The path of one page of a listing at route."""
    if not isinstance(prefix, str) or "/" in prefix:
        raise InvalidRequest(f"{what}: prefix must be a string without '/'")
    if limit is not None and (type(limit) is not int or not 1 <= limit <= MAX_LIST_LIMIT):
        raise InvalidRequest(f"{what}: limit {limit!r}: want 1 to {MAX_LIST_LIMIT}, or None")
    if cursor is not None and (not isinstance(cursor, str) or not cursor):
        raise InvalidRequest(f"{what}: cursor {cursor!r}: want the cursor of the previous page, or None")
    query = {k: v for k, v in (("prefix", prefix), ("limit", limit), ("cursor", cursor)) if v}
    return route + ("?" + urllib.parse.urlencode(query) if query else "")


def _force_release_body(what: str, reason: Any, immediate: Any, fencing_token: Any) -> dict:
    """The body of a force release, checked."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRequest(f"{what}: reason {reason!r}: want a non-blank string")
    if not isinstance(immediate, bool):
        raise InvalidRequest(f"{what}: immediate {immediate!r}: want True or False")
    token = check_token(fencing_token)
    payload: dict = {"reason": reason}
    if immediate:
        payload["immediate"] = True
    if token is not None:
        payload["fencing_token"] = token
    return payload
