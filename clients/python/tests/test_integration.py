"""The client against the real local runner (locald over an in-memory
dynalite), built from this checkout and started once for the module."""

from __future__ import annotations

import re
import socket
import threading
import time
import unittest

import ft288_locks as fl
from ft288_locks import Client

from tests._support import DelayProxy, Runner, TestCase, resource_name, shared_runner

RUNNER: Runner


def setUpModule() -> None:
    global RUNNER
    RUNNER = shared_runner()


class RunnerTests(TestCase):
    def client(self, url: str = "", **kw) -> Client:
        kw.setdefault("backoff", (0.02, 0.2))
        return Client(url or RUNNER.url, **kw)

    def test_round_trip(self):
        c = self.client()
        r = resource_name(self) + " payment:42 é+?#%&="  # needs escaping, no "/"
        lease = self.keep(c.try_acquire(r, ttl=30))
        self.assertTrue(lease.held)
        self.assertRegex(lease.owner, "^" + re.escape(socket.gethostname()[:200]) + r":\d+:[0-9a-f]{16}$")
        self.assertGreater(lease.fencing_token, 0)
        self.assertLessEqual(lease.deadline - time.monotonic(), 30 - 1)  # ttl − margin, from before the request

        st = c.status(r)
        self.assertEqual((st.resource, st.owner, st.fencing_token), (r, lease.owner, lease.fencing_token))

        before, expires = lease.deadline, lease.expires_at
        time.sleep(0.02)
        lease.renew()
        self.assertGreater(lease.deadline, before)
        self.assertGreater(lease.expires_at, expires)
        self.assertEqual(c.status(r).fencing_token, lease.fencing_token)

        lease.release()
        self.assertFalse(lease.lost.is_set())
        self.assertFalse(lease.held)
        with self.assertRaises(fl.NotFoundError):
            c.status(r)
        with self.assertRaises(fl.LeaseReleased):
            lease.check()
        lease.release()  # a second release does nothing

        again = self.keep(c.try_acquire(r, ttl=30))
        self.assertGreater(again.fencing_token, lease.fencing_token)
        self.assertNotEqual(again.owner, lease.owner)  # a new owner per acquire

    def test_contention(self):
        c = self.client()
        r = resource_name(self)
        holder = self.keep(c.try_acquire(r, ttl=30))
        with self.assertRaises(fl.HeldError) as cm:
            c.try_acquire(r)
        self.assertEqual(cm.exception.resource, r)
        self.assertIsNone(cm.exception.expires_at)  # dynalite does not return the holder's item
        t0 = time.monotonic()
        with self.assertRaises(fl.HeldError) as cm:
            c.acquire(r, wait=0.5)
        self.assertGreaterEqual(time.monotonic() - t0, 0.5)
        self.assertGreaterEqual(cm.exception.waited, 0.5)
        self.assertEqual(c.status(r).fencing_token, holder.fencing_token)
        with self.assertRaises(fl.HeldError):
            with c.lock(r, ttl=30, wait=0):
                self.fail("ran the block without the lock")

    def test_acquire_waits_for_release(self):
        c = self.client()
        r = resource_name(self)
        holder = self.keep(c.try_acquire(r, ttl=30))
        releaser = threading.Timer(0.3, holder.release)
        releaser.start()
        self.addCleanup(releaser.join)
        t0 = time.monotonic()
        lease = self.keep(c.acquire(r, wait=10, ttl=30))
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertGreater(lease.fencing_token, holder.fencing_token)
        # the client asked for server-side waiting and learnt whether the
        # service has it (today's runner does not: it polled)
        self.assertIsNotNone(c.server_wait_supported)

    def test_keepalive_holds_past_ttl(self):
        c = self.client()
        r = resource_name(self)
        lease = self.keep(c.try_acquire(r, ttl=2))
        first_expiry = lease.expires_at
        time.sleep(2.3)
        self.assertTrue(lease.held, lease.reason)
        lease.check()
        self.assertGreater(lease.expires_at, first_expiry)
        self.assertEqual(c.status(r).fencing_token, lease.fencing_token)
        with self.assertRaises(fl.HeldError):
            c.try_acquire(r)

    def test_lease_lost_through_takeover_after_expiry(self):
        c = self.client()
        r = resource_name(self)
        lease = self.keep(c.try_acquire(r, ttl=1, keepalive=False))
        # Without renewals the lease is given up at its local deadline
        # (ttl − margin, from before the request): before the service's expiry.
        self.assertTrue(lease.lost.wait(3), "not lost at the local deadline")
        self.assertIsInstance(lease.reason, fl.LeaseExpired)
        # past the service's expiry too (the runner shares this machine's clock)
        time.sleep(max(0.0, lease.expires_at.timestamp() - time.time() + 0.05))
        taker = self.keep(c.try_acquire(r, ttl=30, owner="taker", keepalive=False))
        self.assertGreater(taker.fencing_token, lease.fencing_token)

        with self.assertRaises(fl.LeaseLostError) as cm:
            lease.renew()  # a lost lease is never revived
        with self.assertRaises(fl.LeaseLostError) as cm:
            lease.check()
        lost = cm.exception
        self.assertEqual((lost.resource, lost.fencing_token), (r, lease.fencing_token))
        self.assertIsInstance(lost.reason, fl.LeaseExpired)
        self.assertIn("lost", str(lost))
        # the service agrees: the old lease's renewal is refused
        with self.assertRaises(fl.ForbiddenError):
            c.renew(r, lease.owner, ttl=1, fencing_token=lease.fencing_token)
        # and releasing it leaves the new holder alone
        with self.assertRaises(fl.ForbiddenError):
            lease.release()
        self.assertEqual(c.status(r).owner, "taker")

    def test_refused_renewal_loses_lease(self):
        c = self.client()
        with self.subTest("renew, stale token"):
            r = resource_name(self)
            lease = self.keep(c.try_acquire(r, ttl=30, owner="w1", keepalive=False))
            newer = self.keep(c.try_acquire(r, ttl=30, owner="w1", keepalive=False))  # a twin replaced it
            with self.assertRaises(fl.LeaseLostError) as cm:
                lease.renew()
            self.assertIsInstance(cm.exception.reason, fl.StaleTokenError)
            self.assertTrue(lease.lost.is_set())
            with self.assertRaises(fl.LeaseLostError) as cm:
                lease.check()
            self.assertIsInstance(cm.exception.reason, fl.StaleTokenError)
            self.assertEqual(cm.exception.reason.status, 409)
            self.assertTrue(newer.held)
            self.assertEqual(c.status(r).fencing_token, newer.fencing_token)

        with self.subTest("keep-alive, taken over"):
            r = resource_name(self)
            lease = self.keep(c.try_acquire(r, ttl=2, owner="w1"))
            c.release(r, "w1")  # ended from outside (say, an operator)
            self.keep(c.try_acquire(r, ttl=30, owner="w2", keepalive=False))
            self.assertTrue(lease.lost.wait(3), "keep-alive did not notice")
            # by the refused renewal at ttl/3, not by the local deadline
            self.assertIsInstance(lease.reason, fl.ForbiddenError)
            with self.assertRaises(fl.LeaseLostError):
                lease.check()

    def test_grant_after_the_wait_ran_out_is_released(self):
        proxy = DelayProxy(RUNNER.url, lambda method, path: 0.6 if method == "POST" else 0)
        self.addCleanup(proxy.close)
        c = self.client(proxy.url)
        r = resource_name(self)
        with self.assertRaises(fl.AcquireTimeout):
            c.acquire(r, wait=0.3, ttl=30)
        with self.assertRaises(fl.NotFoundError):  # free at once, not after its TTL
            self.client().status(r)
        self.keep(self.client().try_acquire(r, ttl=30, keepalive=False))

    def test_answer_lost_to_a_timeout_is_released(self):
        proxy = DelayProxy(RUNNER.url, lambda method, path: 5 if method == "POST" else 0)
        self.addCleanup(proxy.close)
        c = self.client(proxy.url, timeout=1.0)
        r = resource_name(self)
        with self.assertRaises(fl.TransportError) as cm:
            c.try_acquire(r, ttl=30)
        self.assertTrue(cm.exception.maybe_sent)
        with self.assertRaises(fl.NotFoundError):
            self.client().status(r)

    def test_context_manager_releases(self):
        c = self.client()
        r = resource_name(self)
        with self.assertRaises(RuntimeError):
            with c.lock(r, ttl=30) as lease:
                self.assertEqual(c.status(r).fencing_token, lease.fencing_token)
                raise RuntimeError("boom")
        with self.assertRaises(fl.NotFoundError):
            c.status(r)
        self.assertFalse(lease.lost.is_set())

        with c.lock(r, ttl=30, wait=1) as again:
            self.assertGreater(again.fencing_token, lease.fencing_token)
        with self.assertRaises(fl.NotFoundError):
            c.status(r)

    def test_context_manager_reports_loss_on_exit(self):
        c = self.client()
        r = resource_name(self)
        with self.assertRaises(fl.LeaseLostError) as cm:
            with c.lock(r, ttl=30, owner="w1"):
                newer = self.keep(c.try_acquire(r, ttl=30, owner="w1", keepalive=False))
        self.assertIsInstance(cm.exception.reason, fl.StaleTokenError)
        self.assertEqual(c.status(r).fencing_token, newer.fencing_token)  # left alone
        # an exception of the block wins over the loss
        with self.assertRaises(ValueError):
            with c.lock(r, ttl=30, owner="w1", wait=1):
                newer = self.keep(c.try_acquire(r, ttl=30, owner="w1", keepalive=False))
                raise ValueError("the block's own error")

    def test_problems(self):
        c = self.client()
        r = resource_name(self)
        with self.assertRaises(fl.ValidationError) as cm:
            c.try_acquire(r, ttl=86401)
        e = cm.exception
        self.assertIsInstance(e, fl.InvalidRequest)
        self.assertEqual((e.status, e.slug, e.instance), (422, "validation-failed", "/locks/" + r))
        self.assertEqual([f.field for f in e.errors], ["ttl_seconds"])
        with self.assertRaises(fl.ValidationError) as cm:
            c.try_acquire(r, owner="w\u200b1")
        self.assertEqual([f.field for f in cm.exception.errors], ["owner"])

        lease = self.keep(c.try_acquire(r, ttl=30, owner="w1", keepalive=False))
        with self.assertRaises(fl.ForbiddenError) as cm:
            c.release(r, "w2")
        self.assertEqual((cm.exception.status, cm.exception.slug), (403, "forbidden"))
        with self.assertRaises(fl.ForbiddenError):
            c.renew(r, "w2", ttl=30)
        with self.assertRaises(fl.StaleTokenError) as cm:
            c.renew(r, "w1", ttl=30, fencing_token=lease.fencing_token + 1)
        self.assertEqual((cm.exception.status, cm.exception.slug), (409, "stale-token"))
        with self.assertRaises(fl.StaleTokenError):
            c.release(r, "w1", fencing_token=lease.fencing_token + 1)
        self.assertTrue(lease.held)
        with self.assertRaises(fl.NotFoundError) as cm:
            c.release(resource_name(self), "w1")
        self.assertEqual((cm.exception.status, cm.exception.slug), (404, "not-found"))


class AdminTests(TestCase):
    """list, list_all and force_release against the local runner, which keeps
    the admin routes open."""

    def test_list_pages_and_list_all(self):
        c = Client(RUNNER.url)
        prefix = resource_name(self)
        leases = [self.keep(c.try_acquire(f"{prefix}-{i}", keepalive=False)) for i in range(5)]
        self.keep(c.try_acquire(prefix[:-1] + "x-other", keepalive=False))  # outside the prefix
        names, cursor, pages = [], None, 0
        while True:
            page = c.list(prefix, limit=2, cursor=cursor)
            self.assertLessEqual(len(page.locks), 2)
            names += [l.resource for l in page.locks]
            pages += 1
            if page.cursor is None:
                break
            cursor = page.cursor
        self.assertGreaterEqual(pages, 3)
        self.assertEqual(sorted(names), sorted(l.resource for l in leases))
        everything = {l.resource: l for l in c.list_all(prefix)}
        self.assertEqual(set(everything), {l.resource for l in leases})
        got = everything[leases[0].resource]
        self.assertIsInstance(got, fl.AdminLock)
        self.assertEqual((got.owner, got.fencing_token, got.principal), (leases[0].owner, leases[0].fencing_token, ""))
        self.assertEqual(c.list_all(prefix + "-none"), [])

    def test_force_release(self):
        c = Client(RUNNER.url, backoff=(0.02, 0.2))
        r = resource_name(self)
        lease = self.keep(c.try_acquire(r, lock_delay=30, keepalive=False))

        # a token that is not the holder's: refused, with the lease that blocks the lock
        with self.assertRaises(fl.StaleTokenError) as cm:
            c.force_release(r, "test: the wrong lease", fencing_token=lease.fencing_token + 1)
        self.assertEqual(cm.exception.status, 409)
        self.assertIsInstance(cm.exception.current, fl.AdminLock)
        self.assertEqual(cm.exception.current.fencing_token, lease.fencing_token)
        self.assertEqual(c.status(r).fencing_token, lease.fencing_token)

        # by default the lease's lock-delay is honoured: free_at is 30 s on
        before = time.time()
        done = c.force_release(r, "test: holder is stuck", fencing_token=lease.fencing_token)
        self.assertEqual((done.ended.resource, done.ended.fencing_token, done.ended.lock_delay_seconds),
                         (r, lease.fencing_token, 30))
        self.assertEqual((done.reason, done.immediate), ("test: holder is stuck", False))
        self.assertAlmostEqual(done.free_at.timestamp() - before, 30, delta=5)
        with self.assertRaises(fl.HeldError):
            c.try_acquire(r)
        # the evicted holder learns it was force released
        with self.assertRaises(fl.LeaseLostError) as lost:
            lease.renew()
        self.assertTrue(lost.exception.force_released)

        # immediate frees the lock inside its lock-delay
        freed = c.force_release(r, "test: holder is dead", immediate=True)
        self.assertTrue(freed.immediate)
        self.keep(c.try_acquire(r, keepalive=False))
        with self.assertRaises(fl.NotFoundError):
            c.force_release(resource_name(self), "test: nothing there")


if __name__ == "__main__":
    unittest.main()
