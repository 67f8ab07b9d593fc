"""Version skew against a stub of each kind of stack, for locks and
semaphores: a waiting acquire tries first, then sends its waiting rounds to
the waiting route (…/wait), and tries go to the try route; a stack from before the waiting routes (API Gateway's 404 on
…/wait) gets the old request, the try route with wait_seconds, for the
client's life; a service that refuses wait_seconds (422 naming it) is
polled."""

from __future__ import annotations

import threading
import time
import unittest
import urllib.parse

import ft288_locks as fl
from ft288_locks import Client, PooledTransport

from tests._support import (
    OldStackProxy,
    ReleasedWire,
    Stub,
    TestCase,
    answer,
    grant,
    held,
    problem,
    resource_name,
    shared_runner,
)
from tests.test_semaphore import full, permit_doc

URL = "http://locks.test"

KINDS = {
    "lock": dict(
        base="/locks/r",
        held=lambda req, **kw: held(req, **kw),
        granted=lambda req: grant(req, 42),
        acquire=lambda c, wait: c.acquire("r", owner="w", ttl=60, wait=wait, keepalive=False),
        try_acquire=lambda c: c.try_acquire("r", owner="w", ttl=60, keepalive=False),
    ),
    "semaphore": dict(
        base="/semaphores/r",
        held=lambda req, **kw: full(req, **kw),
        granted=lambda req: answer(200, {"acquired": True, "permit": permit_doc("r", 0, req.body["owner"], 42, 60)}),
        acquire=lambda c, wait: c.acquire_semaphore("r", 1, owner="w", ttl=60, wait=wait, keepalive=False),
        try_acquire=lambda c: c.try_acquire_semaphore("r", 1, owner="w", ttl=60, keepalive=False),
    ),
}


class StackStub:
    """A stub of one stack ("new": today's; "old": before the waiting routes;
    "oldest": no waiting routes, no waiting; "off": today's, waiting turned
    off) for one kind: held for the first held_for acquires that reach the
    lock (again for n more after hold_for(n)), then granted. A waiting round that ends held answers a ticket."""

    def __init__(self, stack: str, kind: dict, held_for: int) -> None:
        self.stack, self.kind, self.held_for = stack, kind, held_for
        self.reached = 0
        self.mu = threading.Lock()
        self.stub = Stub(self.handle)

    def handle(self, req):
        if req.method == "DELETE":
            return answer(204)
        wait_route = req.path.endswith("/wait")
        wait = req.body.get("wait_seconds")
        if wait_route and self.stack in ("old", "oldest"):
            return answer(404, {"message": "Not Found"})
        bad = []
        if wait is not None and self.stack in ("oldest", "off"):
            bad.append({"field": "wait_seconds", "detail": "is not a known member"})
        elif not wait_route and self.stack != "old" and wait is not None:
            bad.append({"field": "wait_seconds", "detail": "this route does not wait: send waiting acquires to the waiting route"})
        if not wait_route and self.stack != "old" and "queue_ticket" in req.body:
            bad.append({"field": "queue_ticket", "detail": "only waiting acquires queue"})
        if bad:
            return problem(422, "validation-failed", errors=bad)
        with self.mu:
            self.reached += 1
            if self.reached <= self.held_for:
                return self.kind["held"](req, **({"queue_ticket": "tk1"} if wait is not None else {}))
        return self.kind["granted"](req)

    def hold_for(self, n: int) -> None:
        with self.mu:
            self.reached, self.held_for = 0, n

    def wire(self, start: int = 0):
        """(route, wait_seconds, queue_ticket) of each acquire from start on."""
        out = []
        for r in self.stub.sent("POST")[start:]:
            assert r.path in (self.kind["base"], self.kind["base"] + "/wait"), r.path
            out.append(("wait" if r.path.endswith("/wait") else "try", r.body.get("wait_seconds"), r.body.get("queue_ticket")))
        return out

    def client(self) -> Client:
        return Client(URL, transport=self.stub, backoff=(0.01, 0.05))


class VersionSkewTests(TestCase):
    def test_today_free(self):
        for name, kind in KINDS.items():
            with self.subTest(kind=name):
                s = StackStub("new", kind, 0)
                self.keep(kind["acquire"](s.client(), 10))
                self.assertEqual(s.wire(), [("try", None, None)], "a free one is one try, nothing on …/wait")

    def test_today(self):
        for name, kind in KINDS.items():
            with self.subTest(kind=name):
                s = StackStub("new", kind, 3)
                c = s.client()
                self.keep(kind["acquire"](c, 10))
                self.assertEqual(s.wire(), [("try", None, None), ("wait", 9, None), ("wait", 9, "tk1"), ("wait", 9, "tk1")])
                n = len(s.stub.sent("POST"))
                self.keep(kind["try_acquire"](c))
                self.assertEqual(s.wire(n), [("try", None, None)], "a try never waits")

    def test_old_stack_gets_the_old_request_remembered(self):
        for name, kind in KINDS.items():
            with self.subTest(kind=name):
                s = StackStub("old", kind, 3)
                c = s.client()
                self.keep(kind["acquire"](c, 10))
                self.assertEqual(s.wire(), [("try", None, None), ("wait", 9, None), ("try", 9, None), ("try", 9, "tk1"),
                                            ("try", 9, "tk1")])
                n = len(s.stub.sent("POST"))
                s.hold_for(1)
                self.keep(kind["acquire"](c, 10))
                self.assertEqual(s.wire(n), [("try", None, None), ("try", 9, None)], "no …/wait again")

    def test_oldest_stack_is_polled_remembered(self):
        for name, kind in KINDS.items():
            with self.subTest(kind=name):
                s = StackStub("oldest", kind, 3)
                c = s.client()
                self.keep(kind["acquire"](c, 10))
                self.assertEqual(s.wire(), [("try", None, None), ("wait", 9, None), ("try", 9, None), ("try", None, None),
                                            ("try", None, None), ("try", None, None)])
                n = len(s.stub.sent("POST"))
                s.hold_for(1)
                self.keep(kind["acquire"](c, 10))
                self.assertEqual(s.wire(n), [("try", None, None), ("try", None, None)])

    def test_waiting_turned_off_is_polled_on_the_try_route(self):
        for name, kind in KINDS.items():
            with self.subTest(kind=name):
                s = StackStub("off", kind, 2)
                self.keep(kind["acquire"](s.client(), 10))
                self.assertEqual(s.wire(), [("try", None, None), ("wait", 9, None), ("try", None, None), ("try", None, None)])

    def test_service_not_found_is_not_an_old_stack(self):
        stub = Stub(lambda req: problem(404, "not-found") if req.path.endswith("/wait") else held(req))
        with self.assertRaises(fl.NotFoundError):
            Client(URL, transport=stub, backoff=(0.01, 0.05)).acquire("r", owner="w", ttl=60, wait=10, keepalive=False)
        self.assertEqual([r.path for r in stub.requests], ["/locks/r", "/locks/r/wait"], "a try, then no fallback")


def until(cond, timeout: float = 10.0) -> None:
    """Returns once cond() is true; fails after timeout."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


RUNNER_KINDS = {
    "lock": dict(
        path="/locks/",
        hold=lambda c, r: c.try_acquire(r, owner="holder", ttl=30, keepalive=False),
        wait=lambda c, r: c.acquire(r, ttl=30, wait=20, keepalive=False),
    ),
    "semaphore": dict(
        path="/semaphores/",
        hold=lambda c, r: c.try_acquire_semaphore(r, 1, owner="holder", ttl=30, keepalive=False),
        wait=lambda c, r: c.acquire_semaphore(r, 1, ttl=30, wait=20, keepalive=False),
    ),
}


class SkewRunnerTests(TestCase):
    """Both version skews against the real local runner."""

    def setUp(self) -> None:
        super().setUp()
        self.runner = shared_runner()

    def waiting(self, kind, c: Client, res: str):
        """Starts kind's wait for res on c in a thread; returns a join that
        re-raises its error and releases what it got."""
        out = {}

        def run() -> None:
            try:
                out["lease"] = kind["wait"](c, res)
            except BaseException as e:  # noqa: BLE001 - handed to the test
                out["err"] = e

        t = threading.Thread(target=run)
        t.start()

        def join():
            t.join(30)
            if "err" in out:
                raise out["err"]
            out["lease"].release()

        return join

    def test_released_wire_gets_422_and_polls(self):
        for name, kind in RUNNER_KINDS.items():
            with self.subTest(kind=name):
                res = resource_name(self)
                plain = Client(self.runner.url)
                holder = self.keep(kind["hold"](plain, res))
                wire = ReleasedWire(PooledTransport())
                c = Client(self.runner.url, transport=wire, backoff=(0.01, 0.2))
                before = self.runner.counts()
                join = self.waiting(kind, c, res)
                until(lambda: len(wire.snapshot()) >= 3)  # the try, the refusal, then a poll answered held
                holder.release()
                join()
                after = self.runner.counts()
                self.assertEqual(after["try_wait_seconds"] - before["try_wait_seconds"], 1,
                                 "the runner counted the released round's wait_seconds on the try route")
                try_path = kind["path"] + urllib.parse.quote(res, safe="")
                tried, first, *polls = wire.snapshot()
                self.assertEqual(tried, (try_path, False, 200, []), "a try first (released clients sent none)")
                self.assertEqual(first, (try_path, True, 422, ["wait_seconds"]))
                self.assertGreaterEqual(len(polls), 2)
                for p in polls:
                    self.assertEqual(p, (try_path, False, 200, []))

    def test_new_client_on_old_stack_waits_on_the_try_route(self):
        for name, kind in RUNNER_KINDS.items():
            with self.subTest(kind=name):
                old = OldStackProxy(self.runner.url)
                self.addCleanup(old.close)
                res = resource_name(self)
                holder = self.keep(kind["hold"](Client(self.runner.url), res))
                c = Client(old.url, backoff=(0.01, 0.2))
                join = self.waiting(kind, c, res)
                until(lambda: len(old.snapshot()) == 3)
                in_flight = old.snapshot()[2][2] is None  # held at the runner: it waits there
                holder.release()
                join()
                self.assertTrue(in_flight, "the round on the try route waited at the service")
                try_path = kind["path"] + urllib.parse.quote(res, safe="")
                self.assertEqual(old.snapshot(), [[try_path, False, 200], [try_path + "/wait", True, 404], [try_path, True, 200]])
                # Remembered: the next held one's round goes to the try route at once.
                res2 = resource_name(self)
                holder2 = self.keep(kind["hold"](Client(self.runner.url), res2))
                join2 = self.waiting(kind, c, res2)
                until(lambda: len(old.snapshot()) == 5)
                holder2.release()
                join2()
                try2 = kind["path"] + urllib.parse.quote(res2, safe="")
                self.assertEqual([r[:2] for r in old.snapshot()[3:]], [[try2, False], [try2, True]],
                                 "remembered: a try, then no …/wait")


    def test_every_waiting_acquire_tries_first(self):
        """Counted at the runner (tests run one at a time): a waiting call
        tries first, so a free lock or semaphore costs one try and nothing
        on …/wait, a held one a try and a round on …/wait; a try is one
        request on the try route; no wait_seconds reaches a try route."""
        c = Client(self.runner.url)
        keys = ("POST /locks/{resource}", "POST /locks/{resource}/wait", "POST /semaphores/{name}",
                "POST /semaphores/{name}/wait")
        lock_try, lock_wait, sem_try, sem_wait = keys
        n = 10  # uncontended acquires of each kind

        def counted(run, hold=None, wait_key=None):
            """The requests run(res) sent, by acquire route key; with hold,
            res is held first (not counted) and let go once run's round
            reached wait_key."""
            res = resource_name(self)
            holder = self.keep(hold(c, res)) if hold else None
            before = self.runner.counts()
            out = {}

            def go():
                try:
                    run(res)
                except BaseException as e:  # noqa: BLE001 - handed to the test
                    out["err"] = e

            t = threading.Thread(target=go)
            t.start()
            if holder is not None:
                until(lambda: self.runner.counts()["requests"].get(wait_key, 0) > before["requests"].get(wait_key, 0))
                holder.release()
            t.join(30)
            if "err" in out:
                raise out["err"]
            after = self.runner.counts()
            got = {k: after["requests"].get(k, 0) - before["requests"].get(k, 0) for k in keys}
            return {k: v for k, v in got.items() if v}

        def campaign(res):
            e = c.election(res)
            e.campaign(ttl=30)
            e.resign()

        def with_lock(res):
            with c.lock(res, ttl=30):
                pass

        def with_semaphore(res):
            with c.semaphore(res, 2, ttl=30):
                pass

        cases = [
            (f"{n} free acquires", lambda: counted(lambda _: [
                c.acquire(resource_name(self), ttl=30, keepalive=False).release() for _ in range(n)]), {lock_try: n}),
            (f"{n} free semaphore acquires", lambda: counted(lambda _: [
                c.acquire_semaphore(resource_name(self), 2, ttl=30, keepalive=False).release() for _ in range(n)]),
             {sem_try: n}),
            ("lock, free", lambda: counted(with_lock), {lock_try: 1}),
            ("semaphore, free", lambda: counted(with_semaphore), {sem_try: 1}),
            ("campaign, free", lambda: counted(campaign), {lock_try: 1}),
            ("try_acquire", lambda: counted(lambda r: c.try_acquire(r, ttl=30, keepalive=False).release()), {lock_try: 1}),
            ("try_acquire_semaphore", lambda: counted(
                lambda r: c.try_acquire_semaphore(r, 2, ttl=30, keepalive=False).release()), {sem_try: 1}),
            ("acquire, held", lambda: counted(lambda r: RUNNER_KINDS["lock"]["wait"](c, r).release(),
                                              RUNNER_KINDS["lock"]["hold"], lock_wait), {lock_try: 1, lock_wait: 1}),
            ("acquire_semaphore, full", lambda: counted(lambda r: RUNNER_KINDS["semaphore"]["wait"](c, r).release(),
                                                        RUNNER_KINDS["semaphore"]["hold"], sem_wait),
             {sem_try: 1, sem_wait: 1}),
            ("campaign, held", lambda: counted(campaign, RUNNER_KINDS["lock"]["hold"], lock_wait), {lock_try: 1, lock_wait: 1}),
        ]
        first = self.runner.counts()
        for name, run, want in cases:
            got = run()
            print(f"\nrunner counts of {name}: {got}")
            self.assertEqual(got, want, name)
        last = self.runner.counts()
        self.assertEqual(last["try_wait_seconds"], first["try_wait_seconds"], "no wait_seconds on a try route")


if __name__ == "__main__":
    unittest.main()
