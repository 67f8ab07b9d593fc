"""Watch and election: the requests and the observation logic against a stub,
then one leader at a time, takeover and observers against the local runner."""

from __future__ import annotations

import itertools
import queue
import threading
import time
import unittest
import urllib.parse

import ft288_locks as fl
from ft288_locks import Client, Election, Leader, Observation

from tests._support import Runner, Stub, TestCase, answer, grant, held, lock_doc, problem, resource_name, shared_runner

URL = "http://locks.test"
TOKEN = 1796217278318535


def stub_client(stub: Stub, **kw) -> Client:
    kw.setdefault("backoff", (0.001, 0.01))
    return Client(URL, transport=stub, **kw)


def watch_answer(resource: str, token=None, live=False, changed=True):
    """The service's watch answer for the state "latest token, live or not"."""
    doc = {"resource": resource, "changed": changed, "index": 0 if token is None else 2 * token + (0 if live else 1)}
    if token is not None:
        doc["fencing_token"] = token
    if live:
        doc["lock"] = lock_doc(resource, f"owner-{token}", token)
    return answer(200, doc)


def query(req) -> dict:
    return {k: int(v) for k, v in urllib.parse.parse_qsl(urllib.parse.urlsplit(req.url).query)}


class WatchStubTests(TestCase):
    def test_request_and_answer(self):
        stub = Stub(lambda req: watch_answer("a b", TOKEN, live=True))
        c = stub_client(stub)
        r = c.watch("a b", index=5, wait=7)
        req = stub.requests[-1]
        self.assertEqual((req.method, req.path, query(req)), ("GET", "/locks/a%20b/watch", {"index": 5, "wait_seconds": 7}))
        self.assertIsNone(req.body)
        self.assertGreaterEqual(req.timeout, c.timeout + 7)  # the HTTP timeout covers the wait
        self.assertEqual((r.resource, r.index, r.changed, r.fencing_token), ("a b", 2 * TOKEN, True, TOKEN))
        self.assertEqual((r.lock.owner, r.lock.fencing_token), (f"owner-{TOKEN}", TOKEN))
        c.watch("a b")
        self.assertEqual(query(stub.requests[-1]), {"index": 0, "wait_seconds": 20})  # the defaults

        stub.handler = lambda req: watch_answer("never", None, changed=False)
        r = c.watch("never", wait=0)
        self.assertEqual((r.index, r.changed, r.fencing_token, r.lock), (0, False, None, None))

        for doc in ({"resource": "other", "index": 1, "changed": True}, {"resource": "r", "index": -1, "changed": True},
                    {"resource": "r", "index": 1}, [], None):
            stub.handler = lambda req, doc=doc: answer(200, doc)
            with self.subTest(doc=doc), self.assertRaises(fl.TransportError):
                c.watch("r")

    def test_arguments_are_checked_before_sending(self):
        stub = Stub(lambda req: watch_answer("r"))
        c = stub_client(stub)
        for kw in ({"index": -1}, {"index": 1.0}, {"index": True}, {"wait": 21}, {"wait": -1}, {"wait": 1.5},
                   {"wait": None}, {"wait": True}):
            with self.subTest(**kw), self.assertRaises(fl.InvalidRequest):
                c.watch("r", **kw)
        with self.assertRaises(fl.InvalidRequest):
            c.watch("a/b")
        with self.assertRaises(fl.InvalidRequest):
            c.election("..")
        self.assertEqual(stub.requests, [])

    def test_errors_are_raised_as_they_come(self):
        c = stub_client(Stub(lambda req: problem(503, "service-unavailable")))
        with self.assertRaises(fl.UnavailableError):
            c.watch("r")


class ElectionStubTests(TestCase):
    def test_observe_reports_changes_in_order_with_the_leases_it_skipped(self):
        t = TOKEN
        script = [
            # (the index the request must carry, its wait_seconds, the answer)
            (0, 0, watch_answer("e", t, live=False)),             # first: the state now, nobody leads
            (2 * t + 1, 20, problem(503, "service-unavailable")),  # retried after a backoff
            (2 * t + 1, 20, OSError("connection reset")),          # a dropped connection too
            (2 * t + 1, 20, watch_answer("e", t + 3, live=True)),  # t+1, t+2 came and went unseen
            (2 * t + 6, 20, watch_answer("e", t + 3, live=True, changed=False)),  # a round without change
            (2 * t + 6, 20, watch_answer("e", t + 5, live=False)),  # t+3 ended, t+4 and t+5 never seen live
            (2 * t + 11, 20, watch_answer("e", t + 6, live=True)),  # the next one, nothing skipped
            (2 * t + 12, 20, watch_answer("e", t + 6, live=False)),  # it ended
        ]
        steps = iter(script)

        def handler(req):
            index, wait, out = next(steps)
            self.assertEqual(query(req), {"index": index, "wait_seconds": wait})
            if isinstance(out, Exception):
                raise out
            return out

        stub = Stub(handler)
        got = list(itertools.islice(stub_client(stub).election("e").observe(), 5))
        self.assertEqual([(o.leader and o.leader.fencing_token, o.index, o.skipped) for o in got], [
            (None, 2 * t + 1, 0),
            (t + 3, 2 * t + 6, 2),
            (None, 2 * t + 11, 2),
            (t + 6, 2 * t + 12, 0),
            (None, 2 * t + 13, 0),
        ])
        self.assertEqual(got[1].leader, Leader(f"owner-{t + 3}", t + 3, got[1].leader.acquired_at, got[1].leader.expires_at))
        self.assertIsInstance(got[0], Observation)
        self.assertEqual(len(stub.requests), len(script))

    def test_observe_raises_what_retrying_cannot_fix(self):
        c = stub_client(Stub(lambda req: problem(422, "validation-failed")))
        with self.assertRaises(fl.ValidationError):
            next(c.election("e").observe())

    def test_stop_ends_observe_with_a_watch_in_flight(self):
        release = threading.Event()
        self.addCleanup(release.set)

        def handler(req):
            if query(req)["wait_seconds"]:
                release.wait(10)  # a long watch, as the service holds it
            return watch_answer("e", TOKEN, live=False, changed=not query(req)["wait_seconds"])

        stop = threading.Event()
        observations = stub_client(Stub(handler)).election("e").observe(stop)
        self.assertIsNone(next(observations).leader)
        threading.Timer(0.1, stop.set).start()
        start = time.monotonic()
        self.assertEqual(list(observations), [])
        self.assertLess(time.monotonic() - start, 1.0)

    def test_campaign_leader_resign(self):
        state = {"holder": None}

        def handler(req):
            if req.method == "POST":
                if state["holder"] is None:
                    state["holder"] = req.body["owner"]
                    return grant(req, TOKEN)
                return held(req)
            if req.method == "DELETE":
                if state["holder"] != req.body["owner"]:
                    return problem(404, "not-found")
                state["holder"] = None
                return answer(204)
            if state["holder"] is None:
                return problem(404, "not-found")
            return answer(200, lock_doc("e", state["holder"], TOKEN))

        stub = Stub(handler)
        c = stub_client(stub)
        e = c.election("e")
        self.assertIsInstance(e, Election)
        self.assertEqual((e.name, e.lease, e.leader()), ("e", None, None))
        e.resign()  # nothing to resign

        lease = self.keep(e.campaign(owner="candidate-1", ttl=10, timeout=5))
        self.assertEqual((lease.owner, lease.fencing_token, lease.ttl), ("candidate-1", TOKEN, 10))
        self.assertIs(e.lease, lease)
        self.assertIs(e.campaign(), lease)  # leads already
        leader = e.leader()
        self.assertIsInstance(leader, Leader)
        self.assertEqual((leader.owner, leader.fencing_token), ("candidate-1", TOKEN))

        other = c.election("e")
        with self.assertRaises(fl.HeldError):
            other.campaign(timeout=0)
        with self.assertRaises(fl.HeldError):
            other.campaign(timeout=0.2)

        e.resign()
        self.assertEqual(stub.sent("DELETE")[-1].body, {"owner": "candidate-1", "fencing_token": TOKEN})
        self.assertFalse(lease.held)
        self.assertIsNone(e.lease)
        self.assertIsNone(e.leader())

        lease = self.keep(e.campaign())  # a unique owner by default
        self.assertRegex(lease.owner, r":\d+:[0-9a-f]{16}$")
        state["holder"] = "someone else"  # the leadership was lost meanwhile
        e.resign()  # quietly: the release found the lease gone
        self.assertTrue(lease.lost.is_set())
        self.assertIsNone(e.lease)


RUNNER: Runner


def setUpModule() -> None:
    global RUNNER
    RUNNER = shared_runner()


class ElectionRunnerTests(TestCase):
    def client(self) -> Client:
        return Client(RUNNER.url, backoff=(0.02, 0.2))

    def test_one_leader_at_a_time_and_takeover_after_resign(self):
        c = self.client()
        name = resource_name(self)
        terms = []  # (token, owner, elected at, resigning at), each on the monotonic clock
        mu = threading.Lock()
        errors = []

        def candidate(i: int) -> None:
            try:
                e = c.election(name)
                lease = e.campaign(owner=f"candidate-{i}", ttl=10, timeout=30)
                elected = time.monotonic()
                leader = e.leader()
                assert leader is not None and (leader.owner, leader.fencing_token) == (lease.owner, lease.fencing_token)
                time.sleep(0.1)  # leads a while
                lease.check()
                with mu:
                    terms.append((lease.fencing_token, lease.owner, elected, time.monotonic()))
                e.resign()
            except BaseException as ex:
                errors.append(ex)

        threads = [threading.Thread(target=candidate, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        self.assertEqual(len(terms), 3)
        self.assertEqual(len({owner for _, owner, _, _ in terms}), 3)
        terms.sort()
        for (_, _, _, end), (_, _, start, _) in zip(terms, terms[1:]):
            # One leader at a time: each was elected after the one before it
            # stopped leading (its lease is released after `end`).
            self.assertLess(end, start)
        self.assertIsNone(c.election(name).leader())

    def test_takeover_after_loss(self):
        c = self.client()
        name = resource_name(self)
        first, second = c.election(name), c.election(name)
        lost = first.campaign(ttl=3)
        with self.assertRaises(fl.HeldError):
            second.campaign(timeout=0)
        got = []
        t = threading.Thread(target=lambda: got.append(second.campaign(ttl=10, timeout=30)))
        t.start()
        # The first leader's lease ends without a resign (an operator ends it
        # here; expiry works alike): it learns at its next renewal.
        c.force_release(name, "test: leader lost", immediate=True, fencing_token=lost.fencing_token)
        t.join(30)
        self.assertEqual(len(got), 1)
        lease = self.keep(got[0])
        self.assertGreater(lease.fencing_token, lost.fencing_token)
        self.assertEqual(second.leader().owner, lease.owner)
        self.assertTrue(lost.lost.wait(5))
        self.assertIsInstance(lost.reason, (fl.ForbiddenError, fl.NotFoundError))  # refused: another leads
        first.resign()  # quietly: it had lost the leadership already
        second.resign()
        self.assertIsNone(second.leader())

    def test_an_observer_sees_leaders_in_order(self):
        c = self.client()
        name = resource_name(self)
        seen: "queue.Queue[Observation]" = queue.Queue()
        stop = threading.Event()
        errors = []

        def observe() -> None:
            try:
                for o in c.election(name).observe(stop):
                    seen.put(o)
            except BaseException as e:
                errors.append(e)

        observer = threading.Thread(target=observe)
        observer.start()
        self.addCleanup(observer.join, 5)
        self.addCleanup(stop.set)
        log = []

        def until(leader_token) -> None:
            """Waits for the observation of that leader (None: of nobody)."""
            while True:
                o = seen.get(timeout=10)
                log.append(o)
                if (o.leader and o.leader.fencing_token) == leader_token:
                    return

        until(None)  # never taken: nobody leads
        e1, e2 = c.election(name), c.election(name)
        first = e1.campaign(owner="first")
        until(first.fencing_token)
        e1.resign()
        until(None)
        for _ in range(3):  # short leases, some of which the observer may miss
            c.try_acquire(name, ttl=5).release()
        second = e2.campaign(owner="second")
        until(second.fencing_token)
        e2.resign()
        until(None)
        stop.set()
        observer.join(5)
        self.assertFalse(observer.is_alive())
        self.assertEqual(errors, [])

        self.assertEqual([o.index for o in log], sorted({o.index for o in log}), "indexes grow")
        leaders = [o.leader.fencing_token for o in log if o.leader]
        self.assertEqual(leaders, sorted(set(leaders)), "leaders in order")
        self.assertEqual((leaders[0], leaders[-1]), (first.fencing_token, second.fencing_token))
        owners = {o.leader.fencing_token: o.leader.owner for o in log if o.leader}
        self.assertEqual((owners[first.fencing_token], owners[second.fencing_token]), ("first", "second"))
        # Every lease between them was either seen leading or counted as skipped.
        self.assertEqual(len(leaders) + sum(o.skipped for o in log), second.fencing_token - first.fencing_token + 1, log)


if __name__ == "__main__":
    unittest.main()
