"""Leader election on a lock: campaign for leadership, see who leads, observe
the changes (built on the watch route), resign.

The leader is whoever holds the lease on the election's lock. The service
grants one lease at a time, so there is at most one leader in its history;
two candidates may still *believe* they lead for a moment (a paused leader
whose lease ran out), which is what the leader's fencing token is for: pass
it with every write (see ft288_locks.fence).
"""

from __future__ import annotations

import datetime as _dt
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Protocol, Union

from ._defaults import DEFAULT_TTL, MAX_SERVER_WAIT
from ._model import Lock, WatchResult
from ._retry import Backoff, definitive, hint, retryable
from .errors import LockError, NotFoundError
from .lease import Lease

Number = Union[int, float]


class ElectionHost(Protocol):
    """What an election needs of its client (Client is one)."""

    backoff: Backoff

    def acquire(self, resource: str, *, wait: Optional[Number] = ..., ttl: Number = ...,
                owner: Optional[str] = ...) -> Lease: ...

    def status(self, resource: str) -> Lock: ...

    def watch(self, resource: str, index: int = ..., wait: Number = ...) -> WatchResult: ...


@dataclass(frozen=True)
class Leader:
    """Who leads: the owner of the lease on the election's lock and its
    fencing token. Times are the service's clock, informational only."""

    owner: str
    fencing_token: int
    acquired_at: _dt.datetime
    expires_at: _dt.datetime

    @classmethod
    def of(cls, lock: Lock) -> "Leader":
        return cls(lock.owner, lock.fencing_token, lock.acquired_at, lock.expires_at)


@dataclass(frozen=True)
class Observation:
    """One change of leadership seen by Election.observe(): the leader (None:
    nobody leads), the watch index of that state, and how many leaderships
    came and went unseen since the previous observation (their leaders were
    never reported). ``skipped`` is 0 on the first observation and after a
    lock never taken, where nothing can be counted; a huge number means the
    service's token counter restarted (garbage collection removed the idle
    lock)."""

    leader: Optional[Leader]
    index: int
    skipped: int = 0


class Election:
    """An election on one lock; made by Client.election(name). One Election
    per candidate: it remembers the lease of its last campaign, which
    resign() releases. Safe for use from several threads."""

    def __init__(self, client: ElectionHost, name: str) -> None:
        self._client = client
        self._name = name
        self._mu = threading.Lock()
        self._campaigning = threading.Lock()
        self._lease: Optional[Lease] = None

    @property
    def name(self) -> str:
        """The election's lock."""
        return self._name

    @property
    def lease(self) -> Optional[Lease]:
        """The lease of the last campaign (it may have been lost since); None
        before the first and after resign(). "Do I lead?" is its ``held`` or
        ``check()``, which read the clock at the moment they are asked."""
        with self._mu:
            return self._lease

    def __repr__(self) -> str:
        return f"Election({self._name!r})"

    def campaign(self, owner: Optional[str] = None, ttl: Number = DEFAULT_TTL,
                 timeout: Optional[Number] = None) -> Lease:
        """Waits until this candidate leads and returns the leadership lease,
        which renews itself (every ttl/3) until resign() or until it is lost:
        ``lease.check()`` raises LeaseLostError, ``lease.held`` is False and
        ``lease.lost`` is set the moment leadership may have passed to another
        candidate, by the clock when they are asked. Call ``lease.check()``
        before each step the leadership protects. Campaign again to lead
        again.

        ``owner`` names the candidate as leader() and observe() show it
        (default: a new unique ``host:pid:random``). ``timeout``: seconds to
        wait (None: until elected); HeldError when it runs out. While the
        lease of the previous campaign is held, that lease is returned."""
        with self._campaigning:
            current = self.lease
            if current is not None and current.held:
                return current
            lease = self._client.acquire(self._name, wait=timeout, ttl=ttl, owner=owner)
            with self._mu:
                self._lease = lease
            return lease

    def leader(self) -> Optional[Leader]:
        """Who leads now (a strongly consistent read); None when nobody does."""
        try:
            return Leader.of(self._client.status(self._name))
        except NotFoundError:
            return None

    def resign(self) -> None:
        """Gives up the leadership this Election holds (releases the lease of
        its last campaign, retrying temporary failures as Lease.release does),
        so another candidate can take over at once. Returns quietly when it
        holds none, or when the leadership had already been lost; raises the
        last temporary failure when the retries run out (call it again)."""
        lease = self.lease
        if lease is None:
            return
        try:
            lease.release()
        except LockError as e:
            if not definitive(e):
                raise
        with self._mu:
            if self._lease is lease:
                self._lease = None

    def observe(self, stop: Optional[Any] = None) -> Iterator[Observation]:
        """Yields the leadership as it changes: first the current state, then
        each change in order (a new leader, or nobody once the lease ended:
        released, expired, force released), from the watch route — one
        request per change, or per 20 s when nothing changes. The service
        reads the lock about seven times a second, so a leadership shorter than
        that may pass unseen: ``skipped`` counts them.

        Temporary failures (503, throttling, no answer) are retried with the
        client's backoff; other errors are raised. ``stop`` (a
        threading.Event) ends the stream from another thread within a tenth
        of a second, a request in flight included; leaving the ``for`` loop
        ends it too."""
        index, token = 0, None
        first, attempt = True, 0
        while stop is None or not stop.is_set():
            try:
                r = self._watch(index, 0 if first else MAX_SERVER_WAIT, stop)
            except _Stopped:
                return
            except LockError as e:
                if not retryable(e):
                    raise
                delay = self._client.backoff.delay(attempt, hint(e))
                attempt += 1
                if stop is not None:
                    if stop.wait(delay):
                        return
                else:
                    time.sleep(delay)
                continue
            attempt = 0
            if first or r.index != index:
                skipped = 0 if first else _skipped(token, r)
                leader = None if r.lock is None else Leader.of(r.lock)
                index, token, first = r.index, r.fencing_token, False
                yield Observation(leader, r.index, skipped)

    def _watch(self, index: int, wait: int, stop: Optional[Any]) -> WatchResult:
        """One watch; with stop, in a thread of its own, so that stop ends the
        wait at once (the request in flight runs out by itself)."""
        if stop is None:
            return self._client.watch(self._name, index, wait)
        out: List[Any] = []
        done = threading.Event()

        def run() -> None:
            try:
                out.append(self._client.watch(self._name, index, wait))
            except BaseException as e:  # handed to the caller
                out.append(e)
            done.set()

        threading.Thread(target=run, name=f"ft288-locks-watch:{self._name}", daemon=True).start()
        while not done.wait(0.05):
            if stop.is_set():
                raise _Stopped()
        if isinstance(out[0], BaseException):
            raise out[0]
        return out[0]


class _Stopped(Exception):
    """observe()'s stop was set while a watch was in flight."""


def _skipped(prev: Optional[int], r: WatchResult) -> int:
    """How many leaderships came and went between the state whose latest
    token was prev and r, without being seen: tokens grow by one per grant;
    r's own lease counts when it has already ended (it was never seen live)."""
    if prev is None or r.fencing_token is None or r.fencing_token <= prev:
        return 0
    unseen = r.fencing_token - prev
    return unseen - 1 if r.lock is not None else unseen
