"""Lock sets against the real local runner (a granted set, all or nothing,
waiting, renew and release in one request each, loss by the clock and by a
refused renewal, the lock_set context manager) and against a stub
transport (a service that does not wait for sets)."""

from __future__ import annotations

import threading
import time
import unittest

import ft288_locks as fl
from ft288_locks import Client

from tests._support import Runner, Stub, TestCase, answer, lock_doc, problem, resource_name, shared_runner

RUNNER: Runner

TRY = "POST /locksets/{prefix}"
WAIT = "POST /locksets/{prefix}/wait"
RENEW = "POST /locksets/{prefix}/renew"
RELEASE = "DELETE /locksets/{prefix}"


def setUpModule() -> None:
    global RUNNER
    RUNNER = shared_runner()


def set_requests(before, after):
    """The lock-set requests between two counts, by route key (those that changed)."""
    out = {}
    for k in (TRY, WAIT, RENEW, RELEASE):
        d = after["requests"].get(k, 0) - before["requests"].get(k, 0)
        if d:
            out[k] = d
    return out


class LockSetRunnerTests(TestCase):
    def setUp(self) -> None:
        super().setUp()
        self.c = Client(RUNNER.url, backoff=(0.02, 0.2))

    def held_now(self, name: str) -> bool:
        try:
            self.c.status(name)
            return True
        except fl.NotFoundError:
            return False

    def counted(self, fn):
        before = RUNNER.counts()
        out = fn()
        return out, set_requests(before, RUNNER.counts())

    def test_granted_set_a_lease_per_name_in_name_order_in_one_request(self):
        p = resource_name(self)
        s, sent = self.counted(lambda: self.c.try_acquire_set([f"{p}:b", f"{p}:a", f"{p}:c"], ttl=30, keepalive=False))
        self.keep(s)
        self.assertEqual(sent, {TRY: 1})
        self.assertEqual((s.prefix, s.names), (f"{p}:", [f"{p}:a", f"{p}:b", f"{p}:c"]))
        self.assertTrue(s.id)
        self.assertEqual(len({l.fencing_token for l in s.leases}), 3, "a token each")
        for l in s.leases:
            st = self.c.status(l.resource)
            self.assertEqual((st.owner, st.fencing_token), (s.owner, l.fencing_token), l.resource)
        self.assertEqual(s.lease(f"{p}:b").resource, f"{p}:b")
        self.assertTrue(s.held)
        s.check()
        s.release()

    def test_all_or_nothing_one_name_held_refuses_the_set_and_names_it(self):
        p = resource_name(self)
        holder = self.keep(self.c.try_acquire(f"{p}:b", owner="holder", ttl=30, keepalive=False))
        with self.assertRaises(fl.LockSetHeldError) as cm:
            self.c.try_acquire_set([f"{p}:a", f"{p}:b", f"{p}:c"], owner="setter", ttl=30)
        e = cm.exception
        self.assertIsInstance(e, fl.HeldError)
        self.assertEqual((e.blocked_by, e.resource, e.unreleased), (f"{p}:b", f"{p}:b", []))
        self.assertIn("is held by another owner", str(e))
        self.assertFalse(self.held_now(f"{p}:a"), "the name taken before the blocker was given back")
        self.assertFalse(self.held_now(f"{p}:c"), "the name after the blocker was never taken")
        self.assertEqual(self.c.status(f"{p}:b").owner, "holder")
        t = time.monotonic()
        with self.assertRaises(fl.LockSetHeldError) as cm2:
            self.c.acquire_set([f"{p}:a", f"{p}:b"], wait=1.5)
        self.assertGreaterEqual(time.monotonic() - t, 1.4)
        self.assertGreater(cm2.exception.waited, 1.4)
        holder.release()

    def test_waiting_set_tries_first_queues_holding_earlier_names_granted_on_release(self):
        p = resource_name(self)
        holder = self.keep(self.c.try_acquire(f"{p}:y", owner="holder", ttl=30, keepalive=False))
        before = RUNNER.counts()
        got, errors = [], []

        def waiter():
            try:
                got.append(self.c.acquire_set([f"{p}:x", f"{p}:y"], wait=15, ttl=30, keepalive=False))
            except Exception as e:  # reported below
                errors.append(e)

        t = threading.Thread(target=waiter)
        t.start()
        # Let go once the waiter's round has reached …/wait (an event, not a sleep).
        end = time.monotonic() + 10
        while RUNNER.counts()["requests"].get(WAIT, 0) <= before["requests"].get(WAIT, 0):
            self.assertLess(time.monotonic(), end, f"no request to {WAIT} within 10 s")
            time.sleep(0.01)
        # A waiting round takes the names in byte order and queues for the
        # held one holding those before it (docs/design.md, Lock sets): x,
        # once the round has taken it (its try, on the quick route, held
        # nothing).
        end = time.monotonic() + 2
        while not self.held_now(f"{p}:x") and time.monotonic() < end:
            time.sleep(0.01)
        self.assertTrue(self.held_now(f"{p}:x"), "the waiting set holds x, the name before the held y")
        released = time.monotonic()
        holder.release()
        t.join(20)
        self.assertEqual(errors, [])
        s = self.keep(got[0])
        self.assertLess(time.monotonic() - released, 3)
        self.assertGreater(s.lease(f"{p}:y").fencing_token, holder.fencing_token)
        sent = set_requests(before, RUNNER.counts())
        self.assertEqual(sent.get(TRY), 1, sent)
        self.assertGreaterEqual(sent.get(WAIT, 0), 1, sent)
        s.release()

    def test_renew_and_release_every_name_in_one_request_each(self):
        p = resource_name(self)
        s = self.keep(self.c.try_acquire_set([f"{p}:1", f"{p}:2", f"{p}:3"], ttl=30, keepalive=False))
        first = [l.expires_at for l in s.leases]
        deadlines = [l.deadline for l in s.leases]
        time.sleep(0.05)  # so that a renewal moves the deadlines measurably
        _, sent = self.counted(s.renew)
        self.assertEqual(sent, {RENEW: 1})
        for l, e, d in zip(s.leases, first, deadlines):
            self.assertGreater(l.expires_at, e, l.resource)
            self.assertGreater(l.deadline, d, l.resource)
        _, sent = self.counted(s.release)
        self.assertEqual(sent, {RELEASE: 1})
        for l in s.leases:
            self.assertFalse(self.held_now(l.resource), l.resource)
        with self.assertRaises(fl.LeaseReleased):
            s.check()

    def test_keepalive_holds_a_short_set_past_its_ttl_one_request_per_renewal(self):
        p = resource_name(self)
        s = self.keep(self.c.try_acquire_set([f"{p}:a", f"{p}:b"], ttl=2))  # renewed every 667 ms
        first = s.leases[0].expires_at
        _, sent = self.counted(lambda: time.sleep(2.6))
        self.assertTrue(s.held, s.reason)
        self.assertEqual(list(sent), [RENEW], sent)
        self.assertGreaterEqual(sent[RENEW], 3, sent)
        self.assertTrue(all(l.expires_at > first for l in s.leases))
        s.release()

    def test_loss_by_the_clock_the_earliest_deadline_ends_the_set(self):
        p = resource_name(self)
        t = time.monotonic()
        s = self.keep(self.c.try_acquire_set([f"{p}:a", f"{p}:b"], ttl=1, keepalive=False))
        self.assertTrue(0.9 <= s.deadline - t < 1.0, s.deadline - t)
        # Past the deadline, the first question reads the clock: no thread
        # needs to have run (a paused process resumes into this).
        while time.monotonic() < s.deadline:
            time.sleep(0.01)
        self.assertFalse(s.held)
        with self.assertRaises(fl.LeaseLostError) as cm:
            s.check()
        self.assertIsInstance(cm.exception.reason, fl.LeaseExpired)
        self.assertIsInstance(s.reason, fl.LeaseExpired)
        with self.assertRaises(fl.LeaseLostError):
            s.renew()

    def test_a_name_force_released_refuses_the_renewal_and_loses_the_set(self):
        p = resource_name(self)
        s = self.keep(self.c.try_acquire_set([f"{p}:a", f"{p}:b"], ttl=30, keepalive=False))
        # The listing shows which set each lease belongs to; a lock of its own belongs to none.
        single = self.keep(self.c.try_acquire(f"{p}:c", ttl=30, keepalive=False))
        self.assertEqual(sorted((lock.resource, lock.set_id) for lock in self.c.list_all(p)),
                         [(f"{p}:a", s.id), (f"{p}:b", s.id), (f"{p}:c", "")])
        single.release()
        self.c.force_release(f"{p}:b", "test: one name of a set", immediate=True)
        with self.assertRaises(fl.LockSetError) as cm:
            s.renew()
        self.assertEqual(set(cm.exception.failed), {f"{p}:b"})
        self.assertFalse(s.held)
        self.assertTrue(s.lease(f"{p}:a").held, "the other name's lease was renewed")
        with self.assertRaises(fl.LeaseLostError) as lost:
            s.check()
        self.assertEqual((lost.exception.resource, lost.exception.force_released), (f"{p}:b", True))
        with self.assertRaises(fl.LockSetError) as rel:
            s.release()
        self.assertEqual(set(rel.exception.failed), {f"{p}:b"})
        self.assertFalse(self.held_now(f"{p}:a"))

    def test_lock_set_context_manager_releases_and_reports_a_loss(self):
        p = resource_name(self)
        names = [f"{p}:from", f"{p}:to"]
        with self.c.lock_set(names, ttl=10) as s:
            s.check()
            tokens = [l.fencing_token for l in s.leases]
        self.assertEqual(len(tokens), 2)
        for n in names:
            self.assertFalse(self.held_now(n), n)
        with self.assertRaises(RuntimeError):
            with self.c.lock_set(names, ttl=10):
                raise RuntimeError("boom")
        for n in names:
            self.assertFalse(self.held_now(n), n)
        with self.assertRaises(fl.LeaseLostError):
            with self.c.lock_set(names, ttl=10, keepalive=False):
                self.c.force_release(names[0], "test", immediate=True)

    def test_names_are_checked_before_anything_is_sent(self):
        for names, kw in (
            (["a:1", "b:1"], {}), (["t:1", "t:1"], {}), (["t:1", "u:1"], {"prefix": "t:"}), ([], {}),
            ([f"t:{i}" for i in range(26)], {}), ("t:1", {}),
        ):
            with self.subTest(names=names, **kw):
                with self.assertRaises(fl.InvalidRequest):
                    self.c.try_acquire_set(names, **kw)


class LockSetStubTests(TestCase):
    def test_a_service_that_answers_422_to_wait_seconds_is_polled_with_tries(self):
        n = [0]

        def handler(req):
            n[0] += 1
            if req.method == "DELETE":
                return answer(204)
            if req.path.endswith("/wait"):
                return problem(422, "validation-failed", errors=[{"field": "wait_seconds", "detail": "too large"}])
            if n[0] < 5:
                return answer(200, {"acquired": False, "blocked_by": "s:b"})
            locks = [lock_doc(r, req.body["owner"], 10 + i) for i, r in enumerate(req.body["names"])]
            return answer(200, {"acquired": True, "set_id": "set-1", "locks": locks})

        c = Client("http://locks.test", transport=Stub(handler), backoff=(0.01, 0.05))
        s = self.keep(c.acquire_set(["s:a", "s:b"], wait=10, keepalive=False))
        paths = [r.path for r in c._transport.sent("POST")]
        self.assertEqual(paths, ["/locksets/s:", "/locksets/s:/wait", "/locksets/s:", "/locksets/s:", "/locksets/s:"])
        self.assertTrue(all("wait_seconds" not in r.body for r in c._transport.sent("POST") if not r.path.endswith("/wait")))
        self.assertEqual([l.fencing_token for l in s.leases], [10, 11])
        s.release()
        self.assertEqual(c._transport.sent("DELETE")[-1].body,
                         {"owner": s.owner, "locks": [{"resource": "s:a", "fencing_token": 10}, {"resource": "s:b", "fencing_token": 11}]})

    def test_waiting_rounds_bring_back_the_last_rounds_ticket(self):
        # A round that runs out keeps its place in the queue it waited in
        # for the next one (docs/api.md, Lock sets): each round sends back
        # the last round's queue_ticket, kept over a 503 (that round may
        # still run at the service) and cleared by a refusal without one;
        # the try before them sends none.
        rounds = [0]

        def handler(req):
            if req.method == "DELETE":
                return answer(204)
            if not req.path.endswith("/wait"):
                return answer(200, {"acquired": False, "blocked_by": "s:b"})
            rounds[0] += 1
            if rounds[0] in (1, 4):
                return answer(200, {"acquired": False, "blocked_by": "s:b",
                                    "queue_ticket": f"t{rounds[0]}"})
            if rounds[0] == 2:
                return problem(503, "service-unavailable", headers={"Retry-After": "0"})
            if rounds[0] == 3:
                return answer(200, {"acquired": False, "blocked_by": "s:b"})
            locks = [lock_doc(r, req.body["owner"], 10 + i) for i, r in enumerate(req.body["names"])]
            return answer(200, {"acquired": True, "set_id": "set-x1", "locks": locks})

        c = Client("http://locks.test", transport=Stub(handler), backoff=(0.01, 0.05))
        s = self.keep(c.acquire_set(["s:a", "s:b"], wait=10, keepalive=False))
        sent = c._transport.sent("POST")
        self.assertEqual([r.path for r in sent], ["/locksets/s:"] + ["/locksets/s:/wait"] * 5)
        self.assertEqual([r.body.get("queue_ticket") for r in sent], [None, None, "t1", "t1", None, "t4"])
        s.release()


if __name__ == "__main__":
    unittest.main()
