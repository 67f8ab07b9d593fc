"""Every question about a lease reads the clock, and agrees: ``held`` is never
False for a lost lease while ``lost.is_set()`` is False.

``Lease._lose`` once marked the lease ended under its lock, released the lock,
and only then set ``lost``. A thread descheduled between the two (the GIL
hands over every 5 ms; the lease's own thread runs _lose 5 ms before the
deadline) left a window in which ``held`` says False while
``lost.is_set()`` says False too, also past the local deadline: is_set()'s
clock reading (_expire_if_due) sees the lease ended and does nothing, and the
Event is not set yet. The test holds the thread that ends the lease at that
point for 0.5 s (a patched ``lost.set``, standing in for the preemption) and asks
``lost.is_set()`` from another thread, after the deadline by the clock."""

from __future__ import annotations

import threading
import time
import types
from unittest import mock

import ft288_locks.lease as lease_module
from ft288_locks import Client, LeaseLostError

from tests._support import Stub, TestCase, answer, grant, lock_doc

URL = "http://locks.test"


def granting(req):
    if req.method == "DELETE":
        return answer(204)
    if req.path.endswith("/renew"):
        return answer(200, {"renewed": True, "lock": lock_doc("r", req.body["owner"], 7)})
    return grant(req, token=7)


class LostEventWindowTests(TestCase):
    def test_lost_is_set_past_deadline_while_another_thread_ends_the_lease(self) -> None:
        c = Client(URL, transport=Stub(granting), backoff=(0.01, 0.05))
        lease = c.try_acquire("r", ttl=30, keepalive=False)
        entered, resume = threading.Event(), threading.Event()
        real_set = lease.lost.set

        def descheduled_set() -> None:
            entered.set()  # _lose has marked the lease ended, lost not set yet
            resume.wait(0.5)
            real_set()

        lease.lost.set = descheduled_set  # type: ignore[method-assign]
        # Past the local deadline by the lease module's clock, as after a pause.
        real = time.monotonic
        patch = mock.patch.object(lease_module, "time", types.SimpleNamespace(monotonic=lambda: real() + 60, sleep=time.sleep))
        patch.start()
        self.addCleanup(patch.stop)

        def ender() -> None:
            with self.assertRaises(LeaseLostError):
                lease.check()

        t = threading.Thread(target=ender)
        t.start()
        try:
            self.assertTrue(entered.wait(5), "check() did not end the lease")
            self.assertFalse(lease.held, "held past the deadline")
            got = lease.lost.is_set()
            self.assertTrue(got, "lost.is_set() past the local deadline: got False, want True (held already says False)")
        finally:
            resume.set()
            t.join(5)
            lease.release()
