"""Version skew against a stub of each kind of stack, for locks and
semaphores: waiting rounds go to the waiting route (…/wait) and tries to the
try route; a stack from before the waiting routes (API Gateway's 404 on
…/wait) gets the old request, the try route with wait_seconds, for the
client's life; a service that refuses wait_seconds (422 naming it) is
polled."""

from __future__ import annotations

import threading
import unittest

import ft288_locks as fl
from ft288_locks import Client

from tests._support import Stub, TestCase, answer, grant, held, problem
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
    lock, then granted. A waiting round that ends held answers a ticket."""

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
    def test_today(self):
        for name, kind in KINDS.items():
            with self.subTest(kind=name):
                s = StackStub("new", kind, 2)
                c = s.client()
                self.keep(kind["acquire"](c, 10))
                self.assertEqual(s.wire(), [("wait", 9, None), ("wait", 9, "tk1"), ("wait", 9, "tk1")])
                n = len(s.stub.sent("POST"))
                self.keep(kind["try_acquire"](c))
                self.assertEqual(s.wire(n), [("try", None, None)], "a try never waits")

    def test_old_stack_gets_the_old_request_remembered(self):
        for name, kind in KINDS.items():
            with self.subTest(kind=name):
                s = StackStub("old", kind, 2)
                c = s.client()
                self.keep(kind["acquire"](c, 10))
                self.assertEqual(s.wire(), [("wait", 9, None), ("try", 9, None), ("try", 9, "tk1"), ("try", 9, "tk1")])
                n = len(s.stub.sent("POST"))
                self.keep(kind["acquire"](c, 10))
                self.assertEqual(s.wire(n), [("try", 9, None)], "no …/wait again")

    def test_oldest_stack_is_polled_remembered(self):
        for name, kind in KINDS.items():
            with self.subTest(kind=name):
                s = StackStub("oldest", kind, 2)
                c = s.client()
                self.keep(kind["acquire"](c, 10))
                self.assertEqual(s.wire(), [("wait", 9, None), ("try", 9, None), ("try", None, None),
                                            ("try", None, None), ("try", None, None)])
                n = len(s.stub.sent("POST"))
                self.keep(kind["acquire"](c, 10))
                self.assertEqual(s.wire(n), [("try", None, None)])

    def test_waiting_turned_off_is_polled_on_the_try_route(self):
        for name, kind in KINDS.items():
            with self.subTest(kind=name):
                s = StackStub("off", kind, 1)
                self.keep(kind["acquire"](s.client(), 10))
                self.assertEqual(s.wire(), [("wait", 9, None), ("try", None, None), ("try", None, None)])

    def test_service_not_found_is_not_an_old_stack(self):
        stub = Stub(lambda req: problem(404, "not-found") if req.path.endswith("/wait") else held(req))
        with self.assertRaises(fl.NotFoundError):
            Client(URL, transport=stub, backoff=(0.01, 0.05)).acquire("r", owner="w", ttl=60, wait=10, keepalive=False)
        self.assertEqual([r.path for r in stub.requests], ["/locks/r/wait"], "no fallback to the try route")


if __name__ == "__main__":
    unittest.main()
