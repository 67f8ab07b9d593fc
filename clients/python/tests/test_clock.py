"""The lease is judged by the clock when it is asked (issue 22), against a
stub transport: every question (check(), held, reason, lost.is_set(),
lost.wait(), the end of a ``with`` block, an election's "do I lead?") ends
a lease whose local deadline has passed, before the lease's thread has run;
and the thread ends it DELIVERY_ALLOWANCE early, so ``lost``'s waiters
normally wake before the deadline (the figures are printed)."""

from __future__ import annotations

import statistics
import sys
import threading
import time
import types
from typing import List
from unittest import mock

import ft288_locks as fl
import ft288_locks.lease as lease_module
from ft288_locks import DELIVERY_ALLOWANCE, Client

from tests._support import Stub, TestCase, answer, grant, lock_doc

URL = "http://locks.test"


def granting(req):
    if req.method == "DELETE":
        return answer(204)
    if req.path.endswith("/renew"):
        return answer(200, {"renewed": True, "lock": lock_doc("r", req.body["owner"], 7)})
    return grant(req, token=7)


def client(**kw) -> Client:
    return Client(URL, transport=Stub(granting), backoff=(0.01, 0.05), **kw)


class ClockTests(TestCase):
    def jump(self, seconds: float) -> None:
        """Moves the lease module's monotonic clock forward until the test (or
        subtest: doCleanups) ends: as a pause does, while the lease's thread
        sleeps on until real time catches up."""
        real = time.monotonic
        fake = types.SimpleNamespace(monotonic=lambda: real() + seconds, sleep=time.sleep)
        patch = mock.patch.object(lease_module, "time", fake)
        patch.start()
        self.addCleanup(patch.stop)

    def each(self, cases):
        """Each case in a subtest of its own, its cleanups (the clock's jump
        included) done when it ends, passed or failed."""
        for name, case in cases:
            with self.subTest(name):
                try:
                    case()
                finally:
                    self.doCleanups()
                    self.addCleanup(self._check_threads)

    def test_every_question_reads_the_clock(self):
        def lost(lease) -> None:
            self.assertIsInstance(lease.reason, fl.LeaseExpired)
            self.assertTrue(lease.lost.is_set())
            self.assertFalse(lease.held)
            with self.assertRaises(fl.LeaseLostError):
                lease.check()

        def raises(lease) -> bool:
            try:
                lease.check()
            except fl.LeaseLostError:
                return True
            return False

        questions: List[tuple] = [
            ("check()", raises),
            ("held", lambda lease: not lease.held),
            ("reason", lambda lease: isinstance(lease.reason, fl.LeaseExpired)),
            ("lost.is_set()", lambda lease: lease.lost.is_set()),
            ("lost.wait(0)", lambda lease: lease.lost.wait(0)),
        ]

        def case(name: str, ask) -> None:
            lease = self.keep(client().try_acquire("r", ttl=30, keepalive=False))
            self.assertFalse(ask(lease), "lost before the deadline")
            self.jump(31)
            self.assertTrue(ask(lease), f"{name} did not read the clock")
            lost(lease)

        self.each((name, lambda name=name, ask=ask: case(name, ask)) for name, ask in questions)

    def test_a_with_block_that_ran_past_the_deadline_reports_the_loss(self):
        def case(scope) -> None:
            c = Client(URL, transport=Stub(_semaphore_or_lock), backoff=(0.01, 0.05))
            with self.assertRaises(fl.LeaseLostError) as cm:
                with scope(c):
                    self.jump(31)
            self.assertIsInstance(cm.exception.reason, fl.LeaseExpired)

        self.each([("lock", lambda: case(lambda c: c.lock("r", ttl=30, keepalive=False))),
                   ("semaphore", lambda: case(lambda c: c.semaphore("s", 2, ttl=30, keepalive=False)))])

    def test_an_old_leaders_first_question_after_a_pause_says_it_does_not_lead(self):
        e = client().election("e")
        lease = e.campaign(ttl=30, timeout=0)
        self.addCleanup(e.resign)
        self.assertTrue(e.lease.held)
        self.jump(31)
        self.assertFalse(e.lease.held)
        with self.assertRaises(fl.LeaseLostError):
            lease.check()
        self.assertIsNot(e.campaign(timeout=0), lease, "campaign() returned the lost lease as leading")

    def test_the_lost_event_comes_within_the_allowance_and_a_check_after_the_deadline_refuses(self):
        # Leases with deadlines 50 to 650 ms away (ttl 1 s, margins 0.35 to 0.95 s); a thread
        # waits on each one's lost event and notes when it woke.
        n = 60
        leases = [self.keep(client(lease_margin=0.35 + 0.6 * i / n).try_acquire("r", ttl=1, keepalive=False))
                  for i in range(n)]
        woke: List[float] = [0.0] * n

        def waiter(i: int) -> None:
            leases[i].lost.wait(5)
            woke[i] = time.monotonic()

        threads = [threading.Thread(target=waiter, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        late = sorted((woke[i] - leases[i].deadline) * 1000 for i in range(n))
        print(f"\nlost event: woke {late[0]:.2f} / {statistics.median(late):.2f} / {late[int(n * 0.95)]:.2f} / "
              f"{late[-1]:.2f} ms (min / median / p95 / max) after the deadline, DELIVERY_ALLOWANCE "
              f"{DELIVERY_ALLOWANCE * 1000:g} ms; {sum(x > 0 for x in late)} of {n} after it", file=sys.stderr)
        for i in range(n):
            # The thread ends the lease no sooner than the allowance before the deadline.
            self.assertGreaterEqual(woke[i], leases[i].deadline - DELIVERY_ALLOWANCE, f"lease {i}")
            self.assertIsInstance(leases[i].reason, fl.LeaseExpired)

        # A check right after the deadline refuses, whatever the thread has done.
        for i in range(10):
            lease = self.keep(client(lease_margin=0.97).try_acquire("r", ttl=1, keepalive=False))
            while time.monotonic() < lease.deadline:
                pass
            self.assertFalse(lease.held, f"lease {i}")


def _semaphore_or_lock(req):
    if req.path.startswith("/semaphores/") and req.method == "POST" and not req.path.endswith("/renew"):
        doc = dict(lock_doc("s", req.body["owner"], 9), slot=0)
        doc["name"] = doc.pop("resource")
        return answer(200, {"acquired": True, "permit": doc})
    return granting(req)


if __name__ == "__main__":
    import unittest

    unittest.main()
