"""The names and defaults the three clients share (docs/clients.md, "One
family"), against a stub transport: from_env, the default TTL and wait, the
error names and their deprecated aliases, drain, and the admin calls'
requests."""

from __future__ import annotations

import os
import threading
import time
import unittest
import warnings
from unittest import mock

import ft288_locks as fl
from ft288_locks import Client

from tests._support import Stub, TestCase, answer, grant, held, lock_doc, problem

URL = "http://locks.test"


def client(stub: Stub, **kw) -> Client:
    kw.setdefault("backoff", (0.01, 0.05))
    return Client(URL, transport=stub, **kw)


class DefaultTests(TestCase):
    def test_named_defaults(self):
        self.assertEqual((fl.DEFAULT_TTL, fl.DEFAULT_ACQUIRE_WAIT, fl.RELEASE_RETRY_TIMEOUT), (30, 30.0, 10.0))
        self.assertEqual(fl.DEFAULT_ENDPOINT, "http://127.0.0.1:8080")

    def test_acquire_and_lock_wait_30_seconds_with_a_30_second_ttl_by_default(self):
        # Every try is held, every round granted.
        stub = Stub(lambda req: (held(req) if "wait_seconds" not in req.body else grant(req)) if req.method == "POST" else answer(204))
        c = client(stub)
        self.keep(c.acquire("r", keepalive=False)).release()
        with c.lock("r", keepalive=False):
            pass
        # A 30 s wait tries, then asks the service to hold each request for a
        # round of min(20, 30 − 0.25, ⅔ × (30 − 1)) = 19 whole seconds.
        posts = stub.sent("POST")
        self.assertEqual([(r.body["ttl_seconds"], r.body.get("wait_seconds")) for r in posts], [(30, None), (30, 19)] * 2)
        stub = Stub(lambda req: grant(req) if req.method == "POST" else answer(204))
        c = client(stub)
        self.keep(c.try_acquire("r", keepalive=False)).release()
        self.assertEqual(stub.sent("POST")[-1].body["ttl_seconds"], 30)
        self.assertNotIn("wait_seconds", stub.sent("POST")[-1].body)

    def test_lock_with_wait_0_asks_once(self):
        stub = Stub(held)
        with self.assertRaises(fl.HeldError):
            with client(stub).lock("r", wait=0):
                self.fail("ran without the lock")
        self.assertEqual(len(stub.requests), 1)
        self.assertNotIn("wait_seconds", stub.requests[0].body)


class FromEnvTests(TestCase):
    def env(self, **values: str) -> None:
        """The environment for the rest of the test: values, and none of
        the variables from_env reads but those."""
        patch = mock.patch.dict(os.environ)
        patch.start()
        self.addCleanup(patch.stop)
        for k in ("LOCKS_ENDPOINT", "LOCKS_SIGV4", "AWS_REGION"):
            os.environ.pop(k, None)
        os.environ.update(values)

    def test_endpoint_default_and_from_the_environment(self):
        self.env()
        self.assertEqual(Client.from_env().endpoint, "http://127.0.0.1:8080")
        self.env(LOCKS_ENDPOINT="https://abc.execute-api.eu-west-1.amazonaws.com/")
        c = Client.from_env(timeout=5)
        self.assertEqual((c.endpoint, c.timeout, c.region), ("https://abc.execute-api.eu-west-1.amazonaws.com", 5.0, None))
        self.assertEqual(Client.from_env(endpoint="http://other:1").endpoint, "http://other:1")

    def test_sigv4_switch_and_region(self):
        made = []

        class FakeSigV4:
            def __init__(self, region, credentials):
                made.append(region)
                self.region = region or "from-botocore"

        with mock.patch("ft288_locks._sigv4.SigV4", FakeSigV4):
            for value in ("", "0", "false", "No", "off"):
                with self.subTest(value=value):
                    self.env(LOCKS_SIGV4=value, AWS_REGION="eu-west-1")
                    self.assertIsNone(Client.from_env().region)
            self.assertEqual(made, [])
            for value in ("1", "true", "YES", " on "):
                with self.subTest(value=value):
                    self.env(LOCKS_SIGV4=value, AWS_REGION="eu-west-1")
                    self.assertEqual(Client.from_env().region, "eu-west-1")
                    self.assertEqual(Client.from_env(region="us-east-2").region, "us-east-2")  # an argument wins
                    self.assertIsNone(Client.from_env(sigv4=False).region)
            self.env(LOCKS_SIGV4="1")
            self.assertEqual(Client.from_env().region, "from-botocore")  # botocore's own configuration
            self.env(LOCKS_SIGV4="maybe")
            with self.assertRaisesRegex(ValueError, "LOCKS_SIGV4"):
                Client.from_env()


class ErrorNameTests(TestCase):
    def test_old_names_are_deprecated_aliases_of_the_new_classes(self):
        pairs = {
            "Held": fl.HeldError, "LeaseLost": fl.LeaseLostError, "StaleToken": fl.StaleTokenError,
            "Forbidden": fl.ForbiddenError, "NotFound": fl.NotFoundError,
            "ServiceUnavailable": fl.UnavailableError, "ValidationFailed": fl.ValidationError,
        }
        import ft288_locks.errors as errors

        for old, new in pairs.items():
            for module in (fl, errors):
                with self.subTest(old=old, module=module.__name__):
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        self.assertIs(getattr(module, old), new)
                    self.assertEqual([w.category for w in caught], [DeprecationWarning])
                    self.assertIn(new.__name__, str(caught[0].message))
                    self.assertEqual(caught[0].filename, __file__)  # points at the caller
        with self.assertRaises(AttributeError):
            fl.NoSuchName  # noqa: B018

    def test_hierarchy(self):
        self.assertTrue(issubclass(fl.ValidationError, fl.InvalidRequest))
        self.assertTrue(issubclass(fl.GatewayUnavailable, fl.UnavailableError))
        self.assertTrue(issubclass(fl.AcquireTimeout, fl.HeldError))
        self.assertTrue(issubclass(fl.AcquireTimeout, TimeoutError))

    def test_late_grant_is_a_held_error(self):
        def handler(req):
            if req.method == "DELETE":
                return answer(204)
            time.sleep(0.3)  # the grant comes after the wait ran out
            return grant(req, token=7)

        stub = Stub(handler)
        with self.assertRaises(fl.HeldError) as cm:
            client(stub, server_wait=False).acquire("r", wait=0.1)
        self.assertIsInstance(cm.exception, fl.AcquireTimeout)
        self.assertEqual((cm.exception.resource, cm.exception.fencing_token), ("r", 7))
        self.assertEqual(stub.sent("DELETE")[0].body["fencing_token"], 7)


class DrainTests(TestCase):
    def test_drain_waits_for_clean_up_releases_of_other_threads(self):
        releasing, finish = threading.Event(), threading.Event()

        def handler(req):
            if req.method == "POST":
                raise ConnectionResetError("reset")  # unknown outcome: the acquire cleans up
            releasing.set()
            finish.wait(5)
            return answer(204)

        c = client(Stub(handler))
        self.assertTrue(c.drain(timeout=0))
        worker = threading.Thread(target=lambda: self.assertRaises(fl.TransportError, c.try_acquire, "r"))
        worker.start()
        self.addCleanup(worker.join)
        self.assertTrue(releasing.wait(5))
        self.assertFalse(c.drain(timeout=0.05))
        finish.set()
        self.assertTrue(c.drain(timeout=5))


class AdminRequestTests(TestCase):
    def test_list_sends_prefix_limit_cursor_and_follows_pages(self):
        pages = {
            None: {"locks": [dict(lock_doc("job-1", "a"), principal="arn:aws:iam::1:role/x")], "cursor": "c1"},
            "c1": {"locks": [], "cursor": "c2"},
            "c2": {"locks": [lock_doc("job-2", "b")]},
        }

        def handler(req):
            import urllib.parse

            q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(req.url).query))
            return answer(200, pages[q.get("cursor")])

        stub = Stub(handler)
        c = client(stub)
        page = c.list("job-", limit=5)
        self.assertEqual(stub.requests[0].url, URL + "/admin/locks?prefix=job-&limit=5")
        self.assertEqual((page.cursor, page.locks[0].principal), ("c1", "arn:aws:iam::1:role/x"))
        self.assertEqual([l.resource for l in c.list_all("job-")], ["job-1", "job-2"])
        self.assertTrue(all("limit=1000" in r.url for r in stub.requests[1:]))
        c.list()
        self.assertEqual(stub.requests[-1].url, URL + "/admin/locks")
        for kw in ({"prefix": "a/b"}, {"limit": 0}, {"limit": 1001}, {"cursor": ""}):
            with self.subTest(kw=kw), self.assertRaises(fl.InvalidRequest):
                c.list(**kw)

    def test_listings_refuse_a_malformed_page(self):
        permit = dict(lock_doc("job-1", "a"), name="job-1", slot=0, permits=2)
        del permit["resource"]
        reader = dict(permit, mode="read", slot=3)
        del reader["permits"]
        rwlock = {"name": "job-1", "readers": [reader], "queue": [{"mode": "write", "owner": "w2", "until": reader["expires_at"]}],
                  "fencing_token": 3}
        for call, field, row in ((Client.list, "locks", lock_doc("job-1", "a")),
                                 (Client.list_semaphores, "holders", permit),
                                 (Client.list_rwlocks, "rwlocks", rwlock)):
            for what, doc, prefix in (("a row outside the prefix", {field: [row]}, "other-"),
                                      ("rows that are no list", {field: {"0": row}}, "job-"),
                                      ("a cursor that is no string", {field: [], "cursor": 5}, "job-"),
                                      ("a malformed row", {field: [dict(row, fencing_token="3")]}, "job-")):
                with self.subTest(call=call.__name__, page=what):
                    c = client(Stub(lambda req, doc=doc: answer(200, doc)))
                    with self.assertRaises(fl.TransportError):
                        call(c, prefix)
            # The same row under its own prefix is a page.
            c = client(Stub(lambda req, field=field, row=row: answer(200, {field: [row], "cursor": "c"})))
            page = call(c, "job-")
            self.assertEqual((len(getattr(page, field)), page.cursor), (1, "c"))

    def test_force_release_request_and_answers(self):
        ended = lock_doc("job 1", "a", token=5)

        def handler(req):
            if req.body.get("fencing_token") == 6:
                return problem(409, "stale-token", current=dict(ended, principal=""))
            return answer(200, {"ended": ended, "reason": req.body["reason"], "immediate": False,
                                "free_at": "2030-01-02T03:04:05.678Z"})

        stub = Stub(handler)
        c = client(stub)
        done = c.force_release("job 1", "stuck", fencing_token=5)
        req = stub.requests[-1]
        self.assertEqual((req.method, req.path, req.body), ("DELETE", "/admin/locks/job%201", {"reason": "stuck", "fencing_token": 5}))
        self.assertEqual((done.ended.fencing_token, done.reason, done.immediate), (5, "stuck", False))
        self.assertEqual(done.free_at.isoformat(), "2030-01-02T03:04:05.678000+00:00")
        c.force_release("job 1", "dead", immediate=True)
        self.assertEqual(stub.requests[-1].body, {"reason": "dead", "immediate": True})
        with self.assertRaises(fl.StaleTokenError) as cm:
            c.force_release("job 1", "stuck", fencing_token=6)
        self.assertEqual(cm.exception.current.fencing_token, 5)
        n = len(stub.requests)
        for args, kw in ((("job 1", " "), {}), (("a/b", "r"), {}), (("r", "r"), {"fencing_token": 0}),
                         (("r", "r"), {"immediate": 1})):
            with self.subTest(args=args, kw=kw), self.assertRaises(fl.InvalidRequest):
                c.force_release(*args, **kw)
        self.assertEqual(len(stub.requests), n)


class ModuleTests(TestCase):
    def test_no_import_cycles(self):
        # The package's modules import one another in one direction only
        # (lease.py knows the client through the LeaseHost protocol), type
        # checking imports included.
        import ast
        from pathlib import Path

        pkg = Path(fl.__file__).parent
        graph = {}
        for f in pkg.glob("*.py"):
            deps = set()
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 1:
                    deps.add(node.module or "__init__")
            graph[f.stem] = deps

        def visit(module, path):
            for dep in graph.get(module, ()):
                self.assertNotIn(dep, path, f"import cycle: {' -> '.join(path + [dep])}")
                visit(dep, path + [dep])

        for module in graph:
            visit(module, [module])
        self.assertNotIn("client", graph["lease"])

if __name__ == "__main__":
    unittest.main()
