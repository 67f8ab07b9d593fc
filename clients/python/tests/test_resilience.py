"""Against a stub transport: round lengths that leave room for the first
renewal, release retries, API Gateway's throttle answers, lock-delay, and
leases an operator force released."""

from __future__ import annotations

import json
import socket
import threading
import time
import unittest

import ft288_locks as fl
from ft288_locks import Client

from tests._support import Stub, TestCase, answer, grant, held, problem, renewed

URL = "http://locks.test"


def client(stub: Stub, **kw) -> Client:
    kw.setdefault("backoff", (0.01, 0.05))
    return Client(URL, transport=stub, **kw)


def route_throttle(req):
    return answer(429, {"message": "Too Many Requests"})


def lambda_throttle(req):
    return answer(500, {"message": "Internal Server Error"})


def internal(req):
    return problem(500, "internal")


def unavailable(req):
    return problem(503, "service-unavailable")


def not_found(req):
    return problem(404, "not-found")


def force_released(req):
    return problem(404, "not-found", force_released=True)


def dropped(req):
    raise socket.timeout("timed out")


def serve(req):
    """The service's answer when nothing goes wrong; a grant carries the
    lock-delay asked for."""
    if req.method == "DELETE":
        return answer(204)
    if req.path.endswith("/renew"):
        return renewed(req)
    resp = grant(req)
    if "lock_delay_seconds" in req.body:
        doc = json.loads(resp.body)
        doc["lock"]["lock_delay_seconds"] = req.body["lock_delay_seconds"]
        resp = answer(200, doc)
    return resp


def scripted(kind, script):
    """A stub that answers the n-th request for which kind(req) holds with
    script[n], and the rest as the service would."""
    left = list(script)
    mu = threading.Lock()

    def handler(req):
        with mu:
            step = left.pop(0) if kind(req) and left else None
        return step(req) if step else serve(req)

    return Stub(handler)


def is_release(req):
    return req.method == "DELETE"


def is_renew(req):
    return req.path.endswith("/renew")


def is_acquire(req):
    return req.method == "POST" and not is_renew(req)


class RoundLengthTests(TestCase):
    def test_round_is_at_most_two_thirds_of_the_local_validity(self):
        # (ttl, lease_margin, wait_seconds sent; None: polls)
        cases = [(10, 5, 3), (10, None, 6), (120, None, 20), (2, None, 1), (1, None, None)]
        for ttl, margin, want in cases:
            with self.subTest(ttl=ttl, margin=margin):
                stub = scripted(is_acquire, [held])  # the try finds it held
                lease = self.keep(client(stub, lease_margin=margin).acquire("r", wait=60, ttl=ttl, keepalive=False))
                tried, after = stub.sent("POST")[:2]
                self.assertNotIn("wait_seconds", tried.body)
                self.assertEqual(after.body.get("wait_seconds"), want)
                lease.release()

    def test_grant_late_in_round_survives_a_slow_first_renewal(self):
        # Issue 14: lockctl run --ttl 10 has a margin of up to 5 s. The grant
        # comes 0.6 s before the round ends and the first renewal takes
        # 700 ms; rounds of 3 s leave room for it.
        renewed_once = threading.Event()
        renewals = []

        def handler(req):
            if is_acquire(req):
                if "wait_seconds" not in req.body:
                    return held(req)  # the try
                time.sleep(req.body["wait_seconds"] - 0.6)
            elif is_renew(req):
                renewals.append(req)
                if len(renewals) == 1:
                    time.sleep(0.7)
                    resp = serve(req)
                    threading.Timer(0.01, renewed_once.set).start()  # after the lease has read the answer
                    return resp
            return serve(req)

        lease = self.keep(client(Stub(handler), lease_margin=5).acquire("r", wait=30, ttl=10))
        self.assertTrue(renewed_once.wait(10) or lease.lost.is_set())
        self.assertFalse(lease.lost.wait(0.05), f"lease lost: {lease.reason!r}")
        self.assertTrue(lease.held)
        lease.release()


class ReleaseRetryTests(TestCase):
    CASES = [
        # name, the release attempts' answers, expected exception (None: released), DELETEs
        ("503 then 204", [unavailable], None, 2),
        ("503 then 404: the first attempt may have released it", [unavailable, not_found], None, 2),
        ("no answer then 404", [dropped, not_found], None, 2),
        ("route throttle then 204", [route_throttle, route_throttle], None, 3),
        ("Lambda throttle then 204", [lambda_throttle], None, 2),
        ("route throttle then 404: it never reached the service", [route_throttle, not_found], fl.NotFoundError, 2),
        ("internal is not retried", [internal], fl.InternalError, 1),
        ("503 then force released", [unavailable, force_released], fl.NotFoundError, 2),
    ]

    def test_lease_release_retries(self):
        for name, script, want, deletes in self.CASES:
            with self.subTest(name):
                stub = scripted(is_release, script)
                lease = client(stub).try_acquire("r", keepalive=False)
                if want is None:
                    lease.release()
                    self.assertFalse(lease.lost.is_set())
                else:
                    with self.assertRaises(want) as cm:
                        lease.release()
                    if script[-1] is force_released:
                        self.assertTrue(cm.exception.force_released)
                        with self.assertRaises(fl.LeaseLostError) as lost:
                            lease.check()
                        self.assertTrue(lost.exception.force_released)
                self.assertEqual(len(stub.sent("DELETE")), deletes)

    def test_lease_release_gives_up_after_its_timeout(self):
        stub = scripted(is_release, [unavailable] * 1000)
        lease = client(stub).try_acquire("r", ttl=60, keepalive=False)
        start = time.monotonic()
        with self.assertRaises(fl.UnavailableError):
            lease.release(timeout=0.3)
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertGreater(len(stub.sent("DELETE")), 2)

    def test_clean_up_release_retries_throttles(self):
        acquires = []

        def handler(req):
            if is_acquire(req):
                acquires.append(req)
                return unavailable(req) if len(acquires) == 1 else grant(req)
            if is_release(req):
                n = len(stub.sent("DELETE"))
                return [route_throttle, lambda_throttle][n - 1](req) if n <= 2 else answer(204)
            return serve(req)

        stub = Stub(handler)
        with self.assertRaises(fl.UnavailableError):
            client(stub).try_acquire("r")
        self.assertEqual(len(stub.sent("DELETE")), 3)


class ThrottleTests(TestCase):
    def test_acquire_retries_throttles_and_stops_on_internal(self):
        stub = scripted(is_acquire, [route_throttle, lambda_throttle])
        lease = self.keep(client(stub).acquire("r", wait=5, keepalive=False))
        self.assertEqual(len(stub.sent("POST")), 3)
        lease.release()
        broken = scripted(is_acquire, [internal, internal])
        with self.assertRaises(fl.InternalError):
            client(broken).acquire("r", wait=5, owner="w")
        self.assertEqual(len(broken.sent("POST")), 1)

    def test_keepalive_retries_throttles_and_loses_the_lease_on_internal(self):
        for script, lost in (([route_throttle, lambda_throttle], False), ([internal], True)):
            with self.subTest(lost=lost):
                done = threading.Event()
                inner = scripted(is_renew, script)

                def handler(req, inner=inner, done=done, n=len(script)):
                    resp = inner(req.method, req.url, req.headers, req.raw, req.timeout)
                    if is_renew(req) and len(inner.sent("POST", "/renew")) > n:
                        threading.Timer(0.01, done.set).start()
                    return resp

                stub = Stub(handler)
                lease = self.keep(client(stub).try_acquire("r", ttl=3))
                # The first renewal is due after 1 s.
                self.assertTrue(done.wait(3) if not lost else lease.lost.wait(3))
                if lost:
                    self.assertIsInstance(lease.reason, fl.InternalError)
                    self.assertEqual(len(stub.sent("POST", "/renew")), 1, "not retried")
                else:
                    self.assertTrue(lease.held, repr(lease.reason))


class LockDelayTests(TestCase):
    def test_request_carries_lock_delay_and_lease_reports_it(self):
        for lock_delay, sent in ((60, 60), (0, None), (None, None)):
            with self.subTest(lock_delay=lock_delay):
                stub = Stub(serve)
                lease = self.keep(client(stub).try_acquire("r", lock_delay=lock_delay, keepalive=False))
                self.assertEqual(stub.sent("POST")[0].body.get("lock_delay_seconds"), sent)
                self.assertEqual(lease.lock.lock_delay_seconds, sent or 0)
                lease.release()
        stub = Stub(serve)
        for bad in (1.5, -1, True, "60"):
            with self.subTest(bad=bad), self.assertRaises(fl.InvalidRequest):
                client(stub).acquire("r", wait=5, lock_delay=bad)
        self.assertEqual(stub.requests, [])


class ForceReleasedTests(TestCase):
    def test_renewal_refused_as_force_released_loses_the_lease_saying_so(self):
        stub = scripted(is_renew, [force_released])
        lease = self.keep(client(stub).try_acquire("r", ttl=3))
        self.assertTrue(lease.lost.wait(3))
        with self.assertRaises(fl.LeaseLostError) as cm:
            lease.check()
        self.assertTrue(cm.exception.force_released)
        self.assertIn("force released by an operator", str(cm.exception))
        self.assertTrue(cm.exception.reason.force_released)

    def test_with_block_reports_a_lease_force_released_before_its_release(self):
        stub = scripted(is_release, [force_released])
        with self.assertRaises(fl.LeaseLostError) as cm:
            with client(stub).lock("r", ttl=30):
                pass
        self.assertTrue(cm.exception.force_released)


if __name__ == "__main__":
    unittest.main()
