"""Client logic against a stub transport: server-side waiting and its
fallback, grants nobody heard of, Retry-After, problem mapping, lease
keep-alive timing, and SigV4."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import socket
import sys
import threading
import time
import unittest
import urllib.parse
from unittest import mock

import ft288_locks as fl
from ft288_locks import Client

from tests._support import Stub, TestCase, answer, grant, held, lease_threads, problem, renewed

URL = "http://locks.test"


def client(stub: Stub, **kw) -> Client:
    kw.setdefault("backoff", (0.01, 0.05))
    return Client(URL, transport=stub, **kw)


class ServerSideWaitTests(TestCase):
    def test_free_lock_is_one_try(self):
        # A waiting acquire tries first: of a free lock (or semaphore) that
        # one try, without wait_seconds, on the try route, is all.
        stub = Stub(lambda req: grant(req) if req.method == "POST" else answer(204))
        lease = self.keep(client(stub).acquire("r", wait=30, keepalive=False))
        lease.release()
        (post,) = stub.sent("POST")
        self.assertEqual((post.path, post.body), ("/locks/r", {"owner": lease.owner, "ttl_seconds": 30}))

    def test_failed_try_is_tried_again(self):
        # A try that fails (503) is tried again, not waited for on …/wait.
        stub = Stub(lambda req: answer(204) if req.method == "DELETE" else (
            grant(req) if len(stub.sent("POST")) >= 3 else problem(503, "service-unavailable")))
        self.keep(client(stub, backoff=(0.01, 0.05)).acquire("r", wait=10, keepalive=False))
        posts = stub.sent("POST")
        self.assertEqual([(p.path, "wait_seconds" in p.body) for p in posts], [("/locks/r", False)] * 3)

    def test_wait_seconds_sent_and_bounded(self):
        # Each acquire's try is held (as many tries as hold says), then a
        # round (or a poll) is granted.
        hold = [0]

        def handler(req):
            if req.method != "POST":
                return answer(204)
            if "wait_seconds" not in req.body and hold[0] > 0:
                hold[0] -= 1
                return held(req)
            return grant(req)

        stub = Stub(handler)
        c = client(stub)
        for wait, want in ((5, 4), (60, 20), (None, 20), (1.3, 1)):
            with self.subTest(wait=wait):
                hold[0] = 1
                n = len(stub.sent("POST"))
                lease = self.keep(c.acquire("r", wait=wait, ttl=60, keepalive=False))
                tried, req = stub.sent("POST")[n:]
                self.assertEqual((tried.path, tried.body), ("/locks/r", {"owner": lease.owner, "ttl_seconds": 60}))
                self.assertEqual(req.path, "/locks/r/wait")
                self.assertEqual(req.body, {"owner": lease.owner, "ttl_seconds": 60, "wait_seconds": want})
                # the HTTP timeout covers the server's wait
                self.assertGreater(req.timeout, want)
                self.assertLess(req.at - tried.at, 0.3, "the round goes at once after the try")
                lease.release()
        self.assertIs(c.server_wait_supported, True)
        # a wait shorter than a second and a quarter is polled for
        hold[0] = 2
        n = len(stub.sent("POST"))
        self.keep(c.acquire("r", wait=1.2, keepalive=False))
        self.assertEqual(len(stub.sent("POST")[n:]), 3)
        self.assertFalse(any("wait_seconds" in r.body for r in stub.sent("POST")[n:]))
        # try_acquire never waits on the server
        self.keep(c.try_acquire("r", keepalive=False))
        self.assertNotIn("wait_seconds", stub.sent("POST")[-1].body)

    def test_old_server_falls_back_to_polling_and_remembers(self):
        posts = []

        def handler(req):
            if req.method == "DELETE":
                return answer(204)
            if "wait_seconds" in req.body:
                return problem(422, "validation-failed", errors=[
                    {"field": "wait_seconds", "detail": "is not a known member; allowed: owner, ttl_seconds"}])
            posts.append(req)
            return grant(req) if len(posts) >= 3 else held(req)

        stub = Stub(handler)
        c = client(stub)
        lease = self.keep(c.acquire("r", wait=5, keepalive=False))
        bodies = [r.body for r in stub.sent("POST")]
        # the try (held), the round (refused), then polls
        self.assertEqual([("wait_seconds" in b) for b in bodies], [False, True, False, False])
        self.assertIs(c.server_wait_supported, False)
        lease.release()
        posts.clear()
        n = len(stub.sent("POST"))
        self.keep(c.acquire("r", wait=5, keepalive=False))
        self.assertFalse(any("wait_seconds" in r.body for r in stub.sent("POST")[n:]),
                         "a client that learned the server cannot wait asked it to again")

    def test_other_validation_errors_are_raised(self):
        # on the try, and on a round after a held try
        for try_held in (False, True):
            with self.subTest(try_held=try_held):
                stub = Stub(lambda req: held(req) if try_held and "wait_seconds" not in req.body else problem(
                    422, "validation-failed", errors=[{"field": "ttl_seconds", "detail": "must be an integer from 1 to 86400"}]))
                with self.assertRaises(fl.ValidationError) as cm:
                    client(stub).acquire("r", wait=5)
                self.assertEqual([e.field for e in cm.exception.errors], ["ttl_seconds"])
                self.assertEqual(len(stub.requests), 2 if try_held else 1)

    def test_server_wait_then_polling(self):
        # 1st: the try, held: the first round goes at once; 2nd: a server
        # that answers at once despite wait_seconds is backed off from
        # (Retry-After, capped at the backoff maximum), not hammered; 3rd: a
        # server that waited is asked again at once, Retry-After or not;
        # 4th: the last fraction of a second is polled for.
        answered = []

        def handler(req):
            n = len(stub.sent("POST"))
            if n == 3:
                time.sleep(0.95 * req.body["wait_seconds"])
            resp = grant(req) if n == 4 else held(req, {"Retry-After": "1"})
            answered.append(time.monotonic())
            return resp

        stub = Stub(handler)
        c = client(stub, backoff=(0.5, 0.5))
        self.keep(c.acquire("r", wait=2, keepalive=False))
        posts = stub.sent("POST")
        self.assertEqual([p.body.get("wait_seconds") for p in posts], [None, 1, 1, None])
        self.assertLess(posts[1].at - answered[0], 0.3, "no backoff after the held try")
        self.assertGreaterEqual(posts[2].at - answered[1], 0.49, "no backoff after an immediate answer")
        self.assertLess(posts[3].at - answered[2], 0.3, "backed off after the server had waited")


    def test_queue_ticket_sent_back_with_the_next_round(self):
        # Each held round answers the waiter's place in the lock's queue;
        # the next round sends it back, at once (the place lapses 2 s after
        # the round's end); a round without a place sends none, and
        # try_acquire never does.
        tickets = [None, "tk1", "tk1", "tk2", None]  # the try's held answer has no place

        def handler(req):
            n = len(stub.sent("POST")) - 1
            if n < len(tickets):
                doc = {"acquired": False, "resource": "r"}
                if tickets[n]:
                    doc["queue_ticket"] = tickets[n]
                return answer(200, doc)
            return grant(req)

        stub = Stub(handler)
        c = client(stub, backoff=(0.5, 0.5))
        self.keep(c.acquire("r", wait=10, ttl=60, keepalive=False))
        posts = stub.sent("POST")
        self.assertEqual([p.body.get("queue_ticket") for p in posts], [None, None, "tk1", "tk1", "tk2", None])
        self.assertLess(posts[2].at - posts[1].at, 0.3, "no backoff while a place is kept")
        stub = Stub(lambda req: answer(200, {"acquired": False, "resource": "r", "queue_ticket": "tk9"}))
        with self.assertRaises(fl.HeldError):
            client(stub).try_acquire("r", keepalive=False)
        self.assertNotIn("queue_ticket", stub.sent("POST")[0].body)

    def test_unavailable_round_ticket_sent_back(self):
        # A waiting round answered 503 with the waiter's place (the service
        # may have joined the queue but could not learn its entry) is
        # retried with it, and the rounds after keep it. The first request
        # is the try, answered held.
        def handler(req):
            n = len(stub.sent("POST")) - 1
            if n == 0:
                return held(req)
            if n == 1:
                return problem(503, "service-unavailable", queue_ticket="ghost-1", headers={"Retry-After": "0"})
            if n == 2:
                return held(req, queue_ticket=req.body.get("queue_ticket") or "tk-new")
            return grant(req)

        stub = Stub(handler)
        c = client(stub, backoff=(0.01, 0.05))
        self.keep(c.acquire("r", wait=10, ttl=60, keepalive=False))
        self.assertEqual([p.body.get("queue_ticket") for p in stub.sent("POST")], [None, None, "ghost-1", "ghost-1"])


class UnheardGrantTests(TestCase):
    """A grant that may exist but that nobody will use is released."""

    def test_grant_after_wait_ran_out_is_released_with_token(self):
        def handler(req):
            if req.method == "DELETE":
                return answer(204)
            time.sleep(0.3)
            return grant(req, token=7)

        stub = Stub(handler)
        c = client(stub, server_wait=False)
        t0 = time.monotonic()
        with self.assertRaises(fl.AcquireTimeout) as cm:
            c.acquire("r", wait=0.1)
        self.assertIsInstance(cm.exception, TimeoutError)
        self.assertLess(time.monotonic() - t0, 1.0)
        post, delete = stub.requests
        self.assertEqual(delete.method, "DELETE")
        self.assertEqual(delete.body, {"owner": post.body["owner"], "fencing_token": 7})
        # the request was allowed to outlive the wait, so the answer was heard
        self.assertGreater(post.timeout, 0.3)

    def test_unknown_outcome_released_by_generated_owner(self):
        def handler(req):
            if req.method == "DELETE":
                return answer(204)
            raise socket.timeout("timed out")

        stub = Stub(handler)
        with self.assertRaises(fl.TransportError) as cm:
            client(stub).try_acquire("r")
        self.assertTrue(cm.exception.maybe_sent)
        post, delete = stub.requests
        self.assertEqual(delete.method, "DELETE")
        self.assertEqual(delete.body, {"owner": post.body["owner"]})

    def test_unknown_outcome_with_callers_owner_is_left_alone(self):
        # Another instance may hold the lock with the same owner string:
        # a release by owner alone could end its lease.
        stub = Stub(lambda req: (_ for _ in ()).throw(socket.timeout("timed out")))
        with self.assertRaises(fl.TransportError):
            client(stub).try_acquire("r", owner="worker-1")
        self.assertEqual([r.method for r in stub.requests], ["POST"])

    def test_wait_ends_on_5xx_then_released(self):
        def handler(req):
            if req.method == "DELETE":
                return answer(204)
            return problem(503, "service-unavailable", headers={"Retry-After": "1"})

        stub = Stub(handler)
        c = client(stub, backoff=(0.05, 0.1))
        with self.assertRaises(fl.UnavailableError) as cm:
            c.acquire("r", wait=0.5)
        self.assertEqual(cm.exception.retry_after, 1.0)
        posts = stub.sent("POST")
        self.assertGreaterEqual(len(posts), 2, "503 was not retried")
        # Retry-After (1 s) is honoured up to the backoff maximum (0.1 s)
        for a, b in zip(posts, posts[1:]):
            self.assertGreaterEqual(b.at - a.at, 0.095)
        self.assertEqual(stub.requests[-1].method, "DELETE")
        self.assertEqual(stub.requests[-1].body, {"owner": posts[0].body["owner"]})

    def test_refused_connection_needs_no_release(self):
        def handler(req):
            raise ConnectionRefusedError(111, "Connection refused")

        stub = Stub(handler)
        with self.assertRaises(fl.TransportError) as cm:
            client(stub).try_acquire("r")
        self.assertFalse(cm.exception.maybe_sent)
        self.assertEqual([r.method for r in stub.requests], ["POST"])

    def test_clean_answers_need_no_release(self):
        for name, handler, exc in (
            ("held", held, fl.HeldError),
            ("forbidden", lambda req: problem(403, "forbidden"), fl.ForbiddenError),
        ):
            with self.subTest(name):
                stub = Stub(handler)
                with self.assertRaises(exc):
                    client(stub).try_acquire("r")
                with self.assertRaises(exc):
                    client(stub).acquire("r", wait=0.05)
                self.assertNotIn("DELETE", [r.method for r in stub.requests])

    def test_interrupt_while_in_flight_releases(self):
        def handler(req):
            if req.method == "DELETE":
                return answer(204)
            raise KeyboardInterrupt

        stub = Stub(handler)
        with self.assertRaises(KeyboardInterrupt):
            client(stub).acquire("r", wait=5)
        self.assertEqual([r.method for r in stub.requests], ["POST", "DELETE"])


class HeldTests(TestCase):
    def test_held_carries_expiry_and_retry_after(self):
        stub = Stub(lambda req: held(req, {"Retry-After": "3"}, expires_at="2030-01-02T03:04:05.678Z"))
        with self.assertRaises(fl.HeldError) as cm:
            client(stub).try_acquire("r")
        e = cm.exception
        self.assertEqual(e.resource, "r")
        self.assertEqual(e.retry_after, 3.0)
        self.assertEqual(e.expires_at, dt.datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc))

    def test_acquire_honours_retry_after_up_to_the_maximum(self):
        stub = Stub(lambda req: grant(req) if len(stub.requests) >= 3 else held(req, {"Retry-After": "5"}))
        c = client(stub, backoff=(0.01, 0.2), server_wait=False)
        self.keep(c.acquire("r", wait=3, keepalive=False))
        posts = stub.sent("POST")
        self.assertEqual(len(posts), 3)
        for a, b in zip(posts, posts[1:]):
            self.assertGreaterEqual(b.at - a.at, 0.19, "Retry-After not honoured")
            self.assertLess(b.at - a.at, 1.0, "Retry-After not capped at the backoff maximum")


class ProblemMappingTests(TestCase):
    CASES = [
        # status, body, headers, class, slug
        (404, {"type": fl.PROBLEM_TYPE_BASE + "not-found", "title": "Lock not found"}, {}, fl.NotFoundError, "not-found"),
        (403, {"type": fl.PROBLEM_TYPE_BASE + "forbidden", "title": "t"}, {}, fl.ForbiddenError, "forbidden"),
        (409, {"type": fl.PROBLEM_TYPE_BASE + "stale-token", "title": "t"}, {}, fl.StaleTokenError, "stale-token"),
        (422, {"type": fl.PROBLEM_TYPE_BASE + "validation-failed", "title": "t",
               "errors": [{"field": "owner", "detail": "is blank"}]}, {}, fl.ValidationError, "validation-failed"),
        (400, {"type": fl.PROBLEM_TYPE_BASE + "invalid-json", "title": "t"}, {}, fl.InvalidJSON, "invalid-json"),
        (413, {"type": fl.PROBLEM_TYPE_BASE + "payload-too-large", "title": "t"}, {}, fl.PayloadTooLarge,
         "payload-too-large"),
        (503, {"type": fl.PROBLEM_TYPE_BASE + "service-unavailable", "title": "t"}, {"Retry-After": "1"},
         fl.UnavailableError, "service-unavailable"),
        (500, {"type": fl.PROBLEM_TYPE_BASE + "internal", "title": "t"}, {}, fl.InternalError, "internal"),
        (418, {"type": fl.PROBLEM_TYPE_BASE + "teapot", "title": "t"}, {}, fl.ProblemError, "teapot"),
        # API Gateway's own answers
        (403, {"message": "Forbidden"}, {}, fl.GatewayError, ""),
        (404, {"message": "Not Found"}, {}, fl.GatewayError, ""),
        (429, {"message": "Too Many Requests"}, {}, fl.GatewayUnavailable, ""),  # a throttled route
        (500, {"message": "Internal Server Error"}, {}, fl.GatewayUnavailable, ""),  # a throttled function
        (504, {"message": "Endpoint request timed out"}, {}, fl.GatewayUnavailable, ""),
        (413, {"message": "Request Entity Too Large"}, {}, fl.GatewayRejected, ""),
        (502, b"<html>bad gateway</html>", {}, fl.GatewayUnavailable, ""),
    ]

    def test_answers_map_to_exceptions(self):
        for status, body, headers, cls, slug in self.CASES:
            with self.subTest(status=status, body=body):
                raw = body if isinstance(body, bytes) else None
                stub = Stub(lambda req: answer(status, None if raw else body, headers, raw))
                with self.assertRaises(fl.ProblemError) as cm:
                    client(stub).status("r")
                e = cm.exception
                self.assertIs(type(e), cls)
                self.assertEqual((e.status, e.slug), (status, slug))
                if isinstance(body, dict) and "message" in body:
                    self.assertEqual(e.title, body["message"])
                    self.assertNotIsInstance(e, (fl.NotFoundError, fl.ForbiddenError))
                if raw:
                    self.assertEqual(e.title, "Bad Gateway")
                self.assertEqual(isinstance(e, fl.InvalidRequest), status in (400, 413, 422))
                self.assertEqual(isinstance(e, fl.UnavailableError), status in (502, 503, 504) or cls is fl.GatewayUnavailable)
                self.assertEqual(e.temporary, (status >= 500 or status == 429) and slug != "internal")
                self.assertEqual(e.retry_after, 1.0 if headers else None)
                if cls is fl.ValidationError:
                    self.assertEqual(e.errors, [fl.FieldError("owner", "is blank")])
                    self.assertIn("owner: is blank", str(e))

    def test_malformed_success_is_a_transport_error(self):
        for raw in (b"not json", b'{"acquired": "yes"}', b'{"acquired": true, "lock": {"fencing_token": 0}}'):
            with self.subTest(raw=raw):
                stub = Stub(lambda req: answer(200, raw=raw) if req.method == "POST" else answer(204))
                with self.assertRaises(fl.TransportError):
                    client(stub).try_acquire("r")

    def test_invalid_arguments_are_not_sent(self):
        stub = Stub(grant)
        c = client(stub)
        for kw in ({"ttl": 0}, {"ttl": 1.5}, {"ttl": True}, {"ttl": "30"}, {"owner": "  "}):
            with self.subTest(kw=kw), self.assertRaises(fl.InvalidRequest):
                c.try_acquire("r", **kw)
        for resource in ("", "a/b", "..", None):
            with self.subTest(resource=resource), self.assertRaises(fl.InvalidRequest):
                c.try_acquire(resource)
        with self.assertRaises(fl.InvalidRequest):
            c.acquire("r", wait=-1)
        with self.assertRaises(fl.InvalidRequest):
            c.release("r", "w", fencing_token=0)
        self.assertEqual(stub.requests, [])


class LeaseTimingTests(TestCase):
    def test_keepalive_renews_every_third_of_ttl_from_the_grant(self):
        def handler(req):
            if req.path.endswith("/renew"):
                return renewed(req)
            return grant(req, token=42) if req.method == "POST" else answer(204)

        stub = Stub(handler)
        lease = self.keep(client(stub).try_acquire("r", ttl=1))
        granted_at = stub.requests[0].at
        while len(stub.sent("POST", "/renew")) < 2 and time.monotonic() - granted_at < 2:
            time.sleep(0.01)
        renews = stub.sent("POST", "/renew")[:2]
        self.assertEqual(len(renews), 2, renews)
        self.assertTrue(lease.held)
        # renewed: the deadline counts from before the latest renewal
        end = time.monotonic() + 1
        while lease.deadline <= renews[0].at + 0.9 and time.monotonic() < end:
            time.sleep(0.005)  # the second renewal's answer is being processed
        self.assertGreater(lease.deadline, renews[0].at + 0.9, "the second renewal did not extend the lease")
        self.assertLessEqual(lease.deadline, stub.sent("POST", "/renew")[-1].at + 0.9)
        # every ttl/3, timed from the request that granted or renewed the
        # lease (bounds allow for a loaded machine)
        for prev, r in zip([granted_at] + [x.at for x in renews], renews):
            self.assertGreaterEqual(r.at - prev, 1 / 3 - 0.01)
            self.assertLess(r.at - prev, 1 / 3 + 0.3)
            self.assertEqual(r.body, {"owner": lease.owner, "ttl_seconds": 1, "fencing_token": 42})
        lease.release()
        self.assertEqual(stub.requests[-1].body, {"owner": lease.owner, "fencing_token": 42})
        n = len(stub.requests)
        time.sleep(0.35)
        self.assertEqual(len(stub.requests), n, "renewed after release")

    def test_lost_at_local_deadline_when_renewals_keep_failing(self):
        def handler(req):
            if req.path.endswith("/renew"):
                return problem(503, "service-unavailable")
            return grant(req) if req.method == "POST" else answer(204)

        stub = Stub(handler)
        before = time.monotonic()
        lease = self.keep(client(stub).try_acquire("r", ttl=1))
        t0 = stub.requests[0].at
        # t0 + ttl − margin (ttl/10), t0 taken before the request was sent
        self.assertGreaterEqual(lease.deadline, before + 0.9)
        self.assertLessEqual(lease.deadline, t0 + 0.9)
        self.assertFalse(lease.lost.wait(0.8), "lost before the deadline on temporary failures")
        self.assertTrue(lease.lost.wait(1.0), "not lost at the local deadline")
        lost_after = time.monotonic() - t0
        self.assertGreaterEqual(lost_after, 0.9 - 0.01)  # ttl − margin (ttl/10)
        self.assertLess(lost_after, 1.2)
        self.assertIsInstance(lease.reason, fl.LeaseExpired)
        self.assertGreater(len(stub.sent("POST", "/renew")), 2, "temporary renewal failures were not retried")
        with self.assertRaises(fl.LeaseLostError) as cm:
            lease.check()
        self.assertIsInstance(cm.exception.reason, fl.LeaseExpired)

    def test_release_waits_for_a_renewal_in_flight(self):
        in_flight = threading.Event()
        events = []

        def handler(req):
            if req.path.endswith("/renew"):
                in_flight.set()
                time.sleep(0.2)
                events.append("renew answered")
                return renewed(req)
            events.append(req.method)
            return grant(req) if req.method == "POST" else answer(204)

        lease = self.keep(client(Stub(handler)).try_acquire("r", ttl=1))
        self.assertTrue(in_flight.wait(2))
        lease.release()
        self.assertEqual(lease_threads(), [], "release() returned before the lease's thread ended")
        # no renewal can reach the service after the release
        self.assertEqual(events, ["POST", "renew answered", "DELETE"])
        self.assertFalse(lease.lost.is_set())

    def test_release_retry_after_unknown_outcome_finding_nothing_is_quiet(self):
        deletes = []

        def handler(req):
            if req.method == "DELETE":
                deletes.append(req)
                if len(deletes) == 1:
                    raise socket.timeout("timed out")
                return problem(404, "not-found")
            return grant(req)

        lease = client(Stub(handler)).try_acquire("r", keepalive=False)
        lease.release()  # retried; the first attempt may have released it: not a loss
        self.assertFalse(lease.lost.is_set())
        with self.assertRaises(fl.LeaseReleased):
            lease.check()
        lease.release()  # done: no further request
        self.assertEqual(len(deletes), 2)

    def test_context_exit_logs_a_release_that_keeps_failing(self):
        def handler(req):
            if req.method == "DELETE":
                return problem(503, "service-unavailable")
            return grant(req)

        stub = Stub(handler)
        # Retried until the lease has run out (ttl 1 s), then logged.
        with self.assertLogs("ft288_locks", "WARNING"):
            with client(stub).lock("r", ttl=1, keepalive=False):
                pass
        self.assertGreater(len(stub.sent("DELETE")), 3)
        self.assertLess(stub.sent("DELETE")[-1].at - stub.requests[0].at, 1.0)


def _sigv4_available() -> bool:
    try:
        import botocore.auth  # noqa: F401
    except ImportError:
        return False
    return True


class SigV4Tests(TestCase):
    def test_botocore_present_when_required(self):
        # .ci/run installs Debian's python3-botocore and sets this: there, the
        # signing tests below run rather than skip.
        if os.environ.get("LOCKS_REQUIRE_BOTOCORE") == "1":
            self.assertTrue(_sigv4_available(), "LOCKS_REQUIRE_BOTOCORE=1 but botocore is not importable")
        else:
            self.skipTest("LOCKS_REQUIRE_BOTOCORE is not set")

    def test_clear_error_without_botocore(self):
        blocked = {m: None for m in ("botocore", "botocore.auth", "botocore.awsrequest", "botocore.session")}
        with mock.patch.dict(sys.modules, blocked):
            with self.assertRaises(fl.SigV4Unavailable) as cm:
                Client(URL, sigv4=True, region="eu-west-1")
        self.assertIsInstance(cm.exception, ImportError)
        self.assertIsInstance(cm.exception, fl.LockError)
        self.assertIn("botocore", str(cm.exception))
        self.assertIn("ft288-locks[sigv4]", str(cm.exception))
        with self.assertRaises(ValueError):
            Client(URL, region="eu-west-1")  # signing options without sigv4=True

    @unittest.skipUnless(_sigv4_available(), "botocore is not installed: SigV4 signing not tested")
    def test_signature_verifies(self):
        from botocore.credentials import Credentials

        stub = Stub(lambda req: grant(req) if req.method == "POST" else answer(204))
        c = Client("https://abc123.execute-api.eu-west-1.amazonaws.com/", transport=stub, sigv4=True,
                   region="eu-west-1", credentials=Credentials("AKIDEXAMPLE", "SECRET", "SESSIONTOKEN"))
        lease = c.try_acquire("payment 42:é", ttl=30, owner="w1", keepalive=False)
        lease.release()
        for req in stub.requests:
            with self.subTest(req=req):
                self.assertEqual(req.headers["x-amz-security-token"], "SESSIONTOKEN")
                self.assertEqual(_verify_sigv4(req, "AKIDEXAMPLE", "SECRET", "eu-west-1"), "")
        # tampering is detected by the verifier: it can fail
        bad = stub.requests[0]
        bad.raw = bad.raw.replace(b"w1", b"w2")
        self.assertNotEqual(_verify_sigv4(bad, "AKIDEXAMPLE", "SECRET", "eu-west-1"), "")

    @unittest.skipUnless(_sigv4_available(), "botocore is not installed: SigV4 default chain not tested")
    def test_default_chain_from_environment(self):
        env = {
            "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "SECRETENV", "AWS_REGION": "ap-south-1",
            "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        with mock.patch.dict(os.environ, env):
            os.environ.pop("AWS_SESSION_TOKEN", None)
            os.environ.pop("AWS_PROFILE", None)
            stub = Stub(lambda req: problem(404, "not-found"))
            c = Client("https://api.example", transport=stub, sigv4=True)
            self.assertEqual(c.region, "ap-south-1")
            with self.assertRaises(fl.NotFoundError):
                c.status("r")
            self.assertEqual(_verify_sigv4(stub.requests[0], "AKIDENV", "SECRETENV", "ap-south-1"), "")
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
                del os.environ[k]
            with self.assertRaises(fl.SigningError):
                Client("https://api.example", transport=stub, sigv4=True)


def _verify_sigv4(req, access_key: str, secret: str, region: str) -> str:
    """Checks a request's SigV4 signature from the specification, without
    botocore; returns "" when it verifies, else what is wrong."""
    auth = req.headers.get("authorization", "")
    prefix = "AWS4-HMAC-SHA256 "
    if not auth.startswith(prefix):
        return f"no SigV4 Authorization header: {auth!r}"
    fields = dict(part.strip().split("=", 1) for part in auth[len(prefix):].split(","))
    amz_date = req.headers["x-amz-date"]
    scope = f"{amz_date[:8]}/{region}/execute-api/aws4_request"
    if fields["Credential"] != f"{access_key}/{scope}":
        return f"credential {fields['Credential']!r}, want {access_key}/{scope}"
    signed = fields["SignedHeaders"].split(";")
    for must in ("host", "x-amz-date", "content-type" if req.raw else "host"):
        if must not in signed:
            return f"{must} is not signed: {signed}"
    u = urllib.parse.urlsplit(req.url)
    headers = dict(req.headers, host=u.netloc)
    canonical = "\n".join([
        req.method,
        urllib.parse.quote(u.path, safe="/~"),  # each segment encoded twice (it is encoded once in the URL)
        u.query,
        "".join(f"{h}:{' '.join(headers[h].split())}\n" for h in signed),
        ";".join(signed),
        hashlib.sha256(req.raw or b"").hexdigest(),
    ])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in (amz_date[:8], region, "execute-api", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    want = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if fields["Signature"] != want:
        return f"signature {fields['Signature']} does not verify (want {want})"
    return ""


if __name__ == "__main__":
    unittest.main()
