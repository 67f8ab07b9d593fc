"""Read/write locks against the real local runner (many readers together, a
writer excludes them, tokens grow, a queued writer keeps a later reader out,
keep-alive, loss by the clock, release, the read_lock/write_lock context
managers) and against a stub transport (renew and release by mode and slot,
the fallbacks to polling)."""

from __future__ import annotations

import threading
import time
import unittest

import ft288_locks as fl
from ft288_locks import Client

from tests._support import Runner, Stub, TestCase, answer, lock_doc, problem, resource_name, shared_runner

RUNNER: Runner


def setUpModule() -> None:
    global RUNNER
    RUNNER = shared_runner()


class RWRunnerTests(TestCase):
    def setUp(self) -> None:
        super().setUp()
        self.c = Client(RUNNER.url, backoff=(0.02, 0.2))

    def start_writer(self, name: str):
        """A thread that waits for w1's writer's lease of name (30 s), and
        the dict it puts the lease or the error in."""
        got = {}

        def write():
            try:
                got["lease"] = self.keep(self.c.acquire_write(name, owner="w1", ttl=30, keepalive=False, wait=30))
            except Exception as e:  # reported by the caller
                got["error"] = e

        t = threading.Thread(target=write)
        t.start()
        return t, got

    def test_many_readers_together_then_a_writer_above_them_all(self):
        name = resource_name(self)
        readers = [self.keep(self.c.acquire_read(name, ttl=30, keepalive=False, wait=10)) for _ in range(5)]
        self.assertTrue(all(isinstance(r, fl.RWLease) and r.mode == "read" and r.held for r in readers))
        self.assertEqual(len({r.slot for r in readers}), 5, "a slot each")
        self.assertEqual(len({r.fencing_token for r in readers}), 5, "a token each")
        st = self.c.rw_status(name)
        self.assertEqual((st.writer, len(st.readers)), (None, 5))
        with self.assertRaises(fl.HeldError):
            self.c.try_acquire_write(name, owner="w")
        for r in readers:
            r.release()
        w = self.keep(self.c.try_acquire_write(name, owner="w", ttl=30, keepalive=False))
        self.assertEqual((w.mode, w.slot), ("write", None))
        self.assertTrue(all(w.fencing_token > r.fencing_token for r in readers))
        with self.assertRaises(fl.HeldError):
            self.c.try_acquire_read(name, owner="r")
        with self.assertRaises(fl.HeldError):
            self.c.try_acquire_write(name, owner="w2")
        w.release()

    def test_watch_list_and_force_release(self):
        # The watch sees a force released reader end; the listing shows the
        # holders and the queued writer; a stale token is refused with the
        # lease that keeps the slot.
        name = resource_name(self)
        r1 = self.keep(self.c.try_acquire_read(name, owner="r1", ttl=30, keepalive=False))
        r2 = self.keep(self.c.try_acquire_read(name, owner="r2", ttl=30, keepalive=False))
        seen = self.c.watch_rw(name, wait=0)
        self.assertEqual(
            (seen.writer, sorted((r.owner, r.slot, r.fencing_token) for r in seen.readers), seen.fencing_token, seen.index),
            (None, [("r1", r1.slot, r1.fencing_token), ("r2", r2.slot, r2.fencing_token)], r2.fencing_token,
             2 * r2.fencing_token + 1 - 2))
        writer, got = self.start_writer(name)
        deadline = time.monotonic() + 10
        while True:
            rows = self.c.list_rwlocks(name).rwlocks
            if rows and rows[0].queue:
                break
            self.assertLess(time.monotonic(), deadline, f"the writer never queued: {rows}")
            time.sleep(0.02)
        row = rows[0]
        self.assertEqual(
            (row.name, row.writer, sorted((r.owner, r.mode, r.slot, r.fencing_token, r.principal, r.force_released) for r in row.readers),
             [(q.mode, q.owner) for q in row.queue], row.fencing_token),
            (name, None, [("r1", "read", r1.slot, r1.fencing_token, "", False), ("r2", "read", r2.slot, r2.fencing_token, "", False)],
             [("write", "w1")], r2.fencing_token))
        self.assertIsNotNone(row.queue[0].joined_at)
        self.assertGreater(row.queue[0].until, row.queue[0].joined_at)

        # A queued writer is no change of the leases: the watch from before it waits on.
        watched = {}
        watcher = threading.Thread(target=lambda: watched.update(answer=self.c.watch_rw(name, index=seen.index, wait=10)))
        watcher.start()
        with self.assertRaises(fl.StaleTokenError) as cm:
            self.c.force_release_rw(name, "read", r1.slot, "test: not this one", fencing_token=r2.fencing_token)
        cur = cm.exception.current_rw_lease
        self.assertEqual((cur.owner, cur.fencing_token, cm.exception.current, cm.exception.current_permit),
                         ("r1", r1.fencing_token, None, None))

        done = self.c.force_release_rw(name, "read", r1.slot, "test: reader is gone", fencing_token=r1.fencing_token, immediate=True)
        self.assertEqual((done.ended.owner, done.ended.mode, done.ended.slot, done.ended.fencing_token, done.reason, done.immediate),
                         ("r1", "read", r1.slot, r1.fencing_token, "test: reader is gone", True))
        watcher.join(15)
        changed = watched["answer"]
        self.assertEqual((changed.changed, [r.owner for r in changed.readers], changed.index), (True, ["r2"], seen.index + 1))
        with self.assertRaises(fl.NotFoundError) as nf:
            self.c.renew_rw(name, "r1", "read", r1.slot, ttl=30)
        self.assertTrue(nf.exception.force_released)
        self.assertEqual(len(self.c.list_all_rwlocks(name)[0].readers), 1)

        with self.assertRaises(fl.NotFoundError):
            self.c.force_release_rw(name, "write", None, "test: no writer")
        with self.assertRaises(fl.InvalidRequest):
            self.c.force_release_rw(name, "write", 3, "test: a writer has no slot")
        r2.release()
        writer.join(30)
        self.assertNotIn("error", got)
        forced = self.c.force_release_rw(name, "write", None, "test: writer is gone")
        self.assertEqual((forced.ended.owner, forced.ended.mode, forced.ended.slot, forced.ended.fencing_token, forced.immediate),
                         ("w1", "write", None, got["lease"].fencing_token, False))
        self.assertEqual(self.c.list_all_rwlocks(name + "-none"), [])

    def test_a_queued_writer_keeps_a_later_reader_out(self):
        name = resource_name(self)
        r1 = self.keep(self.c.try_acquire_read(name, owner="r1", ttl=30, keepalive=False))
        t, got = self.start_writer(name)
        # The event: the writer's place in the queue.
        deadline = time.monotonic() + 10
        while True:
            st = self.c.rw_status(name)
            if [(q.mode, q.owner) for q in st.queue] == [("write", "w1")]:
                break
            self.assertLess(time.monotonic(), deadline, f"the writer never queued: {st}")
            time.sleep(0.02)
        with self.assertRaises(fl.HeldError):
            self.c.try_acquire_read(name, owner="r2")
        r1.release()
        t.join(30)
        self.assertNotIn("error", got)
        self.assertGreater(got["lease"].fencing_token, r1.fencing_token)
        got["lease"].release()

    def test_keepalive_renews_by_mode_and_slot_and_release_ends_the_lease(self):
        name = resource_name(self)
        for mode in ("read", "write"):
            with self.subTest(mode=mode):
                acquire = self.c.try_acquire_read if mode == "read" else self.c.try_acquire_write
                # A 3 s lease: renewed each second, it survives a renewal
                # slowed by a loaded machine (a 1 s lease lost one slower
                # than ~0.6 s).
                lease = self.keep(acquire(name, ttl=3))
                first = lease.lock.expires_at
                deadline = time.monotonic() + 10
                while (lease.lock.expires_at - first).total_seconds() < 3 and lease.held:
                    self.assertLess(time.monotonic(), deadline)
                    time.sleep(0.05)
                lease.check()
                self.assertEqual(lease.info.expires_at, lease.lock.expires_at)
                lease.release()
                with self.assertRaises(fl.LeaseReleased):
                    lease.check()
                st = self.c.rw_status(name)
                self.assertEqual((st.writer, st.readers), (None, []))
                with self.assertRaises(fl.NotFoundError):
                    self.c.release_rw(name, lease.owner, mode, lease.slot, fencing_token=lease.fencing_token)

    def test_loss_by_the_clock(self):
        lease = self.keep(self.c.try_acquire_read(resource_name(self), ttl=1, keepalive=False))
        # Past the deadline, the first question reads the clock: no thread
        # needs to have run (a paused process resumes into this).
        while time.monotonic() < lease.deadline:
            time.sleep(max(lease.deadline - time.monotonic(), 0) + 0.001)
        self.assertFalse(lease.held)
        with self.assertRaises(fl.LeaseLostError) as cm:
            lease.check()
        self.assertIsInstance(cm.exception.reason, fl.LeaseExpired)
        self.assertEqual((cm.exception.mode, cm.exception.slot), ("read", lease.slot))

    def test_read_lock_and_write_lock_tokens_grow(self):
        name = resource_name(self)
        tokens = []
        with self.c.read_lock(name, ttl=5) as lease:
            lease.check()
            tokens.append(lease.fencing_token)
        with self.c.write_lock(name, ttl=5) as lease:
            lease.check()
            tokens.append(lease.fencing_token)
        with self.c.read_lock(name, ttl=5) as lease:
            tokens.append(lease.fencing_token)
        self.assertEqual(tokens, sorted(set(tokens)))
        st = self.c.rw_status(name)
        self.assertEqual((st.writer, st.readers, st.fencing_token), (None, [], tokens[-1]))


def rw_doc(name: str, mode: str, owner: str, token: int) -> dict:
    doc = lock_doc(name, owner, token)
    doc["name"] = doc.pop("resource")
    doc["mode"] = mode
    if mode == "read":
        doc["slot"] = 3
    return doc


class RWStubTests(TestCase):
    def test_watch_list_and_force_release_decode_a_writer_force_released_and_free_at(self):
        writer = dict(rw_doc("cache", "write", "w1", 8), lock_delay_seconds=10, principal="arn:aws:iam::1:role/w")
        forced = dict(writer, expires_at="2020-01-01T00:00:00Z", force_released=True)
        answers = {
            "watch": {"name": "cache", "index": 16, "changed": True, "writer": writer, "fencing_token": 8},
            "list": {"rwlocks": [{"name": "cache", "writer": forced, "readers": [], "queue": [], "fencing_token": 8}]},
            "force": {"ended": writer, "reason": "gone", "immediate": False, "free_at": "2030-01-02T03:04:05.678Z"},
        }

        def client_of(over=None):
            docs = dict(answers, **(over or {}))

            def handler(req):
                route = "force" if req.method == "DELETE" else "watch" if "/watch" in req.path else "list"
                return answer(200, docs[route])
            return Client("http://locks.test", transport=Stub(handler))

        w = client_of().watch_rw("cache", index=15, wait=1)
        self.assertEqual((w.writer.owner, w.writer.mode, w.writer.slot, w.writer.lock_delay_seconds, w.readers, w.fencing_token),
                         ("w1", "write", None, 10, [], 8))
        row = client_of().list_rwlocks("ca").rwlocks[0]
        self.assertEqual((row.writer.owner, row.writer.force_released, row.writer.principal, row.readers),
                         ("w1", True, "arn:aws:iam::1:role/w", []))
        done = client_of().force_release_rw("cache", "write", None, "gone")
        self.assertEqual((done.ended.owner, done.ended.mode, done.ended.fencing_token, done.immediate, done.free_at.year),
                         ("w1", "write", 8, False, 2030))

        reader = rw_doc("cache", "read", "r1", 9)
        for what, over, call in (
            ("a reader as the watch's writer", {"watch": dict(answers["watch"], writer=reader)},
             lambda c: c.watch_rw("cache", wait=1)),
            ("another name's reader in the watch", {"watch": {"name": "cache", "index": 16, "changed": True,
                                                            "readers": [rw_doc("other", "read", "r", 9)]}},
             lambda c: c.watch_rw("cache", wait=1)),
            ("a reader as the listing's writer", {"list": {"rwlocks": [{"name": "cache", "writer": reader, "readers": [],
                                                                       "queue": [], "fencing_token": 9}]}},
             lambda c: c.list_rwlocks("ca")),
            ("a writer among the listing's readers", {"list": {"rwlocks": [{"name": "cache", "readers": [writer], "queue": [],
                                                                           "fencing_token": 9}]}},
             lambda c: c.list_rwlocks("ca")),
            ("a reader ended for the writer", {"force": dict(answers["force"], ended=reader)},
             lambda c: c.force_release_rw("cache", "write", None, "gone")),
        ):
            with self.subTest(what=what), self.assertRaises(fl.TransportError):
                call(client_of(over))
        with self.assertRaises(fl.InvalidRequest) as bad:
            client_of().force_release_rw("cache", "upgrade", 3, "gone")
        self.assertIn("mode", str(bad.exception))

    def test_renew_and_release_by_mode_slot_and_token(self):
        for mode in ("read", "write"):
            with self.subTest(mode=mode):
                def handler(req, mode=mode):
                    if req.method == "DELETE":
                        return answer(204)
                    if req.path.endswith("/renew"):
                        return answer(200, {"renewed": True, "lease": rw_doc("c", mode, "o1", 7)})
                    return answer(200, {"acquired": True, "lease": rw_doc("c", mode, "o1", 7)})

                c = Client("http://locks.test", transport=Stub(handler))
                acquire = c.try_acquire_read if mode == "read" else c.try_acquire_write
                lease = acquire("c", owner="o1", keepalive=False)
                lease.renew()
                lease.release()
                want = {"owner": "o1", "mode": mode, "fencing_token": 7}
                if mode == "read":
                    want["slot"] = 3
                sent = c._transport.requests
                self.assertEqual([f"{r.method} {r.path}" for r in sent],
                                 [f"POST /rwlocks/c/{mode}", "POST /rwlocks/c/renew", "DELETE /rwlocks/c"])
                self.assertEqual(sent[1].body, dict(want, ttl_seconds=30))
                self.assertEqual(sent[2].body, want)

    def test_a_refused_waiting_route_is_polled_with_tries_and_remembered(self):
        refusals = {
            "422": lambda: problem(422, "validation-failed", errors=[{"field": "wait_seconds", "detail": "no"}]),
            "no route": lambda: answer(404, {"message": "Not Found"}),
        }
        for why, refuse in refusals.items():
            with self.subTest(why=why):
                n = [0]

                def handler(req, refuse=refuse):
                    if req.path.endswith("/wait"):
                        return refuse()
                    n[0] += 1
                    if n[0] % 4:
                        return answer(200, {"acquired": False, "name": "c"})
                    return answer(200, {"acquired": True, "lease": rw_doc("c", "read", req.body["owner"], 9)})

                c = Client("http://locks.test", transport=Stub(handler), backoff=(0.01, 0.05))
                lease = self.keep(c.acquire_read("c", wait=10, keepalive=False))
                self.assertEqual(lease.slot, 3)
                paths = [r.path for r in c._transport.sent("POST")]
                self.assertEqual(paths, ["/rwlocks/c/read", "/rwlocks/c/read/wait", "/rwlocks/c/read", "/rwlocks/c/read", "/rwlocks/c/read"])
                self.assertTrue(all("wait_seconds" not in r.body for r in c._transport.sent("POST") if not r.path.endswith("/wait")))
                before = len(c._transport.requests)
                self.keep(c.acquire_read("c", wait=10, keepalive=False))
                self.assertTrue(all(r.path == "/rwlocks/c/read" for r in c._transport.requests[before:]))

    def test_a_bad_mode_or_slot_is_refused_before_sending(self):
        c = Client("http://locks.test", transport=Stub(lambda req: answer(500)))
        for call in (lambda: c.release_rw("c", "o", "upgrade"), lambda: c.release_rw("c", "o", "read", 64),
                     lambda: c.renew_rw("c", "o", "read")):
            with self.assertRaises(fl.InvalidRequest):
                call()
        self.assertEqual(c._transport.requests, [])


if __name__ == "__main__":
    unittest.main()
