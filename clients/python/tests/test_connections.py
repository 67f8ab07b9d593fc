"""Connection reuse: a client's calls, from one thread or several, and its
leases' renewals share a few keep-alive connections to the real local
runner, counted by a forwarder that accepts them; a connection the server
closed is replaced, and a request is sent again only when it certainly did
not reach the server."""

from __future__ import annotations

import http.server
import os
import threading
import time
import unittest
from unittest import mock

import ft288_locks as fl
import ft288_locks._http as fl_http
from ft288_locks import Client

from tests._support import ConnCounter, Runner, TestCase, resource_name, shared_runner

RUNNER: Runner
CALLS = 10  # the runner's capacity model allows status bursts of 200, then 100/s


def setUpModule() -> None:
    global RUNNER
    RUNNER = shared_runner()


class ConnectionReuseTests(TestCase):
    def counter(self) -> ConnCounter:
        counter = ConnCounter(RUNNER.url)
        self.addCleanup(counter.close)
        return counter

    def test_sequential_calls_share_one_connection(self):
        counter = self.counter()
        c = Client(counter.url)
        self.addCleanup(c.close)
        r = resource_name(self)
        lease = self.keep(c.try_acquire(r, keepalive=False))
        for _ in range(CALLS):
            self.assertEqual(c.status(r).fencing_token, lease.fencing_token)
        lease.renew()
        lease.release()
        with self.assertRaises(fl.NotFoundError):  # an error answer leaves the connection usable
            c.status(r)
        self.assertEqual(counter.accepted, 1, f"{CALLS + 4} sequential calls")

    def test_before_pooling_every_call_opened_a_connection(self):
        # The measure of the change: urllib, the transport before, opens one
        # connection per request.
        counter = self.counter()
        c = Client(counter.url, transport=fl.UrllibTransport())
        r = resource_name(self)
        for _ in range(CALLS):
            with self.assertRaises(fl.NotFoundError):
                c.status(r)
        self.assertEqual(counter.accepted, CALLS)

    def test_threads_share_the_pool(self):
        counter = self.counter()
        c = Client(counter.url)
        self.addCleanup(c.close)
        r = resource_name(self)
        lease = self.keep(c.try_acquire(r, keepalive=False))
        threads, errors = 4, []
        start = threading.Barrier(threads)

        def work() -> None:
            try:
                start.wait(10)
                for _ in range(CALLS):
                    c.status(r)
            except Exception as e:  # reported below
                errors.append(e)

        for _ in range(2):  # the second round reuses the first round's connections
            workers = [threading.Thread(target=work) for _ in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            start.reset()
        self.assertEqual(errors, [])
        self.assertLessEqual(counter.accepted, threads, f"{2 * threads * CALLS} calls from {threads} threads")
        lease.release()

    def test_keepalive_renewals_reuse_the_clients_connection(self):
        counter = self.counter()
        c = Client(counter.url)
        self.addCleanup(c.close)
        lease = self.keep(c.try_acquire(resource_name(self), ttl=3))  # renews every second
        seen = [lease.lock]
        deadline = time.monotonic() + 15
        while len(seen) < 3 and time.monotonic() < deadline:  # the grant and two renewals
            if lease.lock is not seen[-1]:
                seen.append(lease.lock)
            time.sleep(0.02)
        self.assertEqual(len(seen), 3, "the lease did not renew twice")
        lease.release()
        self.assertFalse(lease.lost.is_set())
        self.assertEqual(counter.accepted, 1, "a grant, two renewals and a release")

    def test_a_connection_the_server_closed_is_replaced(self):
        counter = self.counter()
        c = Client(counter.url)
        self.addCleanup(c.close)
        r = resource_name(self)
        for reset in (False, True):
            with self.subTest(reset=reset):
                with self.assertRaises(fl.NotFoundError):
                    c.status(r)
                before = counter.accepted
                counter.drop(reset=reset)  # as a server closing an idle connection does
                with self.assertRaises(fl.NotFoundError):
                    c.status(r)
                self.assertEqual(counter.accepted, before + 1)

    def test_stale_connection_failing_while_sending_is_retried_on_a_new_one(self):
        # The check before reuse would notice the reset; without it, writing
        # the request fails, so the server cannot have it, and the request
        # goes out again on a new connection.
        counter = self.counter()
        c = Client(counter.url)
        self.addCleanup(c.close)
        r = resource_name(self)
        with self.assertRaises(fl.NotFoundError):
            c.status(r)
        counter.drop(reset=True)
        self.wait_until_closed(c)
        with mock.patch.object(fl_http, "_readable", lambda sock: False):
            with self.assertRaises(fl.NotFoundError):
                c.status(r)
        self.assertEqual(counter.accepted, 2)

    def test_failure_after_the_request_was_written_is_not_retried(self):
        # A connection closed gracefully under the request: the request was
        # written, and whether the server acted on it is unknown, so the
        # transport does not repeat it (the caller's retries decide).
        counter = self.counter()
        c = Client(counter.url)
        self.addCleanup(c.close)
        r = resource_name(self)
        with self.assertRaises(fl.NotFoundError):
            c.status(r)
        counter.drop(reset=False)
        self.wait_until_closed(c)
        with mock.patch.object(fl_http, "_readable", lambda sock: False):
            with self.assertRaises(fl.TransportError) as cm:
                c.status(r)
        self.assertTrue(cm.exception.maybe_sent)
        self.assertEqual(counter.accepted, 1)

    def wait_until_closed(self, c: Client) -> None:
        """Waits until the client's pooled connection reads as closed."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            idle = [conn for conns in c._transport._idle.values() for conn, _ in conns]
            if idle and all(fl_http._readable(conn.sock) for conn in idle):
                return
            time.sleep(0.01)
        self.fail("the pooled connection did not see the server close it")


class RefusedConnectionTests(TestCase):
    def test_refused_connection_is_not_sent(self):
        with socket_port() as port:
            pass  # closed again: nothing listens on it
        with self.assertRaises(fl.TransportError) as cm:
            Client(f"http://127.0.0.1:{port}").status("r")
        self.assertFalse(cm.exception.maybe_sent)


class ProxyTests(TestCase):
    def test_http_proxy_from_the_environment(self):
        seen = []

        class Proxy(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append(self.path)
                body = b'{"type":"https://ft288.dev/problems/not-found","title":"Lock not found","status":404}'
                self.send_response(404)
                self.send_header("Content-Type", "application/problem+json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        self.addCleanup(thread.join)
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        env = {"HTTP_PROXY": f"http://127.0.0.1:{server.server_address[1]}", "NO_PROXY": "", "no_proxy": ""}
        with mock.patch.dict(os.environ, env):
            os.environ.pop("http_proxy", None)
            with self.assertRaises(fl.NotFoundError):
                Client("http://locks.invalid:8080").status("r 1")
        self.assertEqual(seen, ["http://locks.invalid:8080/locks/r%201"])


class socket_port:
    """A free local port (bound while the with block runs)."""

    def __enter__(self) -> int:
        import socket

        self._s = socket.socket()
        self._s.bind(("127.0.0.1", 0))
        return self._s.getsockname()[1]

    def __exit__(self, *exc) -> None:
        self._s.close()


if __name__ == "__main__":
    unittest.main()
