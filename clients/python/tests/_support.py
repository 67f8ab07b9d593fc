"""Test helpers: the local runner, a delaying proxy, a connection-counting
forwarder, a stub transport, and a check that no lease thread outlives its
test."""

from __future__ import annotations

import atexit
import http.client
import http.server
import itertools
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from ft288_locks import Response

REPO_ROOT = Path(__file__).resolve().parents[3]
_RUN_ID = format(int(time.time() * 1000) % (1 << 40), "x")
_seq = itertools.count(1)


def resource_name(test: unittest.TestCase) -> str:
    """A lock name unique to the call that names the test."""
    return f"py-{test.id().rsplit('.', 1)[-1]}-{_RUN_ID}-{next(_seq)}"


# -- the local runner ----------------------------------------------------------


class Runner:
    """locald over its own in-memory dynalite, built from this checkout."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="ft288-locks-py-")
        self.proc: Optional[subprocess.Popen] = None
        self.url = ""
        self._counts_mu = threading.Lock()
        try:
            binary = os.environ.get("LOCKS_LOCALD") or self._build()
            self.url = self._start(binary, "127.0.0.1:0")
            if urllib.parse.urlsplit(self.url).port == 0:  # a runner that does not report its port
                self.stop()
                self.url = self._start(binary, f"127.0.0.1:{_free_port()}")
        except BaseException:
            self.close()
            raise

    def _build(self) -> str:
        if not (REPO_ROOT / "go.mod").is_file():
            raise RuntimeError(f"no go.mod in {REPO_ROOT}: the tests must run from a checkout of the repository")
        binary = os.path.join(self.tmp, "locald")
        try:
            subprocess.run(
                ["go", "build", "-o", binary, "./local/cmd/locald"],
                cwd=REPO_ROOT, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600,
            )
        except FileNotFoundError:
            raise RuntimeError("building the local runner needs Go on PATH") from None
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"go build ./local/cmd/locald failed:\n{e.output.decode(errors='replace')}") from None
        return binary

    def _start(self, binary: str, addr: str) -> str:
        env = dict(os.environ)
        # Exactly as `make run` starts it: none of the variables that change it.
        for k in ("DYNAMODB_ENDPOINT", "DYNAMODB_RETURNS_OLD_ITEM", "TABLE_NAME", "MAX_TTL_SECONDS",
                  "TOMBSTONE_RETENTION_SECONDS", "ADDR"):
            env.pop(k, None)
        env["LOG_LEVEL"] = "info"  # the "serving" line is at info
        self.log_path = os.path.join(self.tmp, "locald.log")
        self.counts_path = os.path.join(self.tmp, "counts.json")
        self._log = open(self.log_path, "ab")
        offset = self._log.tell()  # this start's lines only
        self.proc = subprocess.Popen(
            [binary, "-addr", addr, "-counts", self.counts_path], cwd=REPO_ROOT, env=env,
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
        )
        entry = self._await_log(offset, "serving the lock API", 60, 0.05)
        if entry is None:
            raise RuntimeError(f"locald did not start (exit {self.proc.poll()}):\n{self.log_tail()}")
        return entry["url"]

    def counts(self) -> Dict[str, Any]:
        """What the runner counted so far (locald -counts): {"requests": {route
        key: n}, "try_wait_seconds": n, ...}. Asks with SIGUSR1 and waits for
        the "counts written" line it logs."""
        with self._counts_mu:
            offset = os.path.getsize(self.log_path)
            assert self.proc is not None
            self.proc.send_signal(signal.SIGUSR1)
            if self._await_log(offset, "counts written", 10, 0.01) is None:
                raise RuntimeError(f"locald wrote no counts within 10 s:\n{self.log_tail()}")
            with open(self.counts_path, "rb") as c:
                return json.load(c)

    def _await_log(self, offset: int, msg: str, timeout: float, poll: float) -> Optional[Dict[str, Any]]:
        """The first JSON line of locald's log after offset whose msg is msg,
        read as locald writes it (every poll seconds); None after timeout
        seconds, or once locald has exited without writing it."""
        deadline = time.monotonic() + timeout
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            buf = b""
            while time.monotonic() < deadline:
                buf += f.read()
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        continue
                    if entry.get("msg") == msg:
                        return entry
                if self.proc is None or self.proc.poll() is not None:
                    return None
                time.sleep(poll)
        return None

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # locald stops dynalite too
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


_shared: Optional[Runner] = None
_shared_mu = threading.Lock()


def shared_runner() -> Runner:
    """One local runner for every test module of the run, stopped at exit:
    starting locald and its dynalite costs seconds on a slow machine."""
    global _shared
    with _shared_mu:
        if _shared is None:
            _shared = Runner()
            atexit.register(_shared.close)
        return _shared


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- proxies ---------------------------------------------------------------------


def _forward(up: urllib.parse.SplitResult, method: str, path: str, body: bytes,
             timeout: float) -> Tuple[int, List[Tuple[str, str]], bytes]:
    """Sends a request to upstream and returns its status, headers and body."""
    conn = http.client.HTTPConnection(up.hostname, up.port, timeout=timeout)
    try:
        conn.request(method, path, body=body or None, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheaders(), resp.read()
    finally:
        conn.close()


def _answer(handler: http.server.BaseHTTPRequestHandler, status: int, headers: List[Tuple[str, str]],
            data: bytes) -> None:
    """Answers with status, headers (but for hop-by-hop and per-server ones)
    and data; a client that gave up on the answer is no error."""
    try:
        handler.send_response(status)
        for k, v in headers:
            if k.lower() not in ("connection", "transfer-encoding", "date", "server"):
                handler.send_header(k, v)
        handler.end_headers()
        handler.wfile.write(data)
    except OSError:
        pass  # the client gave up on this answer


class _Proxy:
    """An HTTP server on 127.0.0.1 that hands each request and its body to
    handle(handler, body), each in a thread of its own; close() joins them."""

    def __init__(self, name: str, handle: Callable[[http.server.BaseHTTPRequestHandler, bytes], None]) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def _handle(self) -> None:
                handle(self, self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            do_GET = do_POST = do_DELETE = _handle

            def log_message(self, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = False  # so that server_close() joins the handler threads

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()  # waits for the handler threads
        self._thread.join()


class DelayProxy(_Proxy):
    """An HTTP proxy in front of upstream that forwards each request at once
    and holds back the answer for delay(method, path) seconds, or until the
    client hangs up."""

    def __init__(self, upstream: str, delay: Callable[[str, str], float]) -> None:
        up = urllib.parse.urlsplit(upstream)

        def handle(h: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
            status, headers, data = _forward(up, h.command, h.path, body, 10)
            # Hold the answer back, but stop as soon as the client hangs up.
            select.select([h.connection], [], [], delay(h.command, h.path))
            _answer(h, status, headers, data)

        super().__init__("delay-proxy", handle)


# -- version skew: an old stack, the released wire --------------------------------


def acquire_route(path: str) -> str:
    """"try" for /locks/{r} and /semaphores/{n}, "wait" for their …/wait, ""
    for any other path."""
    parts = path.split("?", 1)[0].split("/")
    if len(parts) < 3 or parts[0] != "" or parts[1] not in ("locks", "semaphores") or not parts[2]:
        return ""
    if len(parts) == 3:
        return "try"
    if len(parts) == 4 and parts[3] == "wait":
        return "wait"
    return ""


def _waits(body: Optional[bytes]) -> bool:
    try:
        w = json.loads(body or b"{}").get("wait_seconds")
    except (ValueError, AttributeError):
        return False
    return isinstance(w, int) and w > 0


class OldStackProxy(_Proxy):
    """A proxy in front of upstream that answers as a stack from before the
    waiting routes did: API Gateway's 404 {"message":"Not Found"} on POST
    …/wait, and a try-acquire carrying wait_seconds > 0 served by upstream's
    waiting route (the try route waited then). Everything else passes
    through. ``acquires`` records (path, carried wait_seconds, status) of
    each acquire as the client sent it; status is None while in flight."""

    def __init__(self, upstream: str) -> None:
        up = urllib.parse.urlsplit(upstream)
        self.acquires: List[List[Any]] = []
        self._mu = threading.Lock()

        def handle(h: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
            route = acquire_route(h.path) if h.command == "POST" else ""
            rec: List[Any] = [h.path, _waits(body), None]
            if route:
                with self._mu:
                    self.acquires.append(rec)
            if route == "wait":
                rec[2] = 404
                data = b'{"message":"Not Found"}'
                _answer(h, 404, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))], data)
                return
            path = h.path + "/wait" if route == "try" and rec[1] else h.path
            status, headers, data = _forward(up, h.command, path, body, 60)
            rec[2] = status
            _answer(h, status, headers, data)

        super().__init__("old-stack", handle)

    def snapshot(self) -> List[List[Any]]:
        with self._mu:
            return [list(r) for r in self.acquires]


class ReleasedWire:
    """A transport that sends what the released clients sent: a waiting round
    to the try route (its …/wait cut off), with its wait_seconds and
    queue_ticket. ``acquires`` records (path, carried wait_seconds, status,
    the fields a problem answer names) of each acquire."""

    def __init__(self, transport: Callable[..., Response]) -> None:
        self._next = transport
        self.acquires: List[Any] = []
        self._mu = threading.Lock()

    def __call__(self, method, url, headers, body, timeout):  # the Transport signature
        parts = urllib.parse.urlsplit(url)
        route = acquire_route(parts.path) if method == "POST" else ""
        if route == "wait":
            url = urllib.parse.urlunsplit(parts._replace(path=parts.path[: -len("/wait")]))
        resp = self._next(method, url, headers, body, timeout)
        if route:
            fields: List[str] = []
            if resp.status >= 400:
                try:
                    fields = [e.get("field") for e in json.loads(resp.body).get("errors", [])]
                except (ValueError, AttributeError):
                    pass
            with self._mu:
                self.acquires.append((urllib.parse.urlsplit(url).path, _waits(body), resp.status, fields))
        return resp

    def snapshot(self) -> List[Any]:
        with self._mu:
            return list(self.acquires)


# -- a connection-counting forwarder ---------------------------------------------------


class ConnCounter:
    """A TCP forwarder in front of upstream that counts the connections it
    accepts, and can drop the ones it holds, as a server or load balancer
    closing idle keep-alive connections does."""

    def __init__(self, upstream: str) -> None:
        up = urllib.parse.urlsplit(upstream)
        self._upstream = (up.hostname, up.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)  # closing it would not wake an accept()
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._mu = threading.Lock()
        self._accepted = 0
        self._open: List[socket.socket] = []  # the client-facing ends still open
        self._threads: List[threading.Thread] = []
        self._stop = threading.Event()
        t = threading.Thread(target=self._accept, name="conn-counter", daemon=True)
        t.start()
        self._threads.append(t)

    @property
    def accepted(self) -> int:
        """How many connections were accepted so far."""
        with self._mu:
            return self._accepted

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                down, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            down.settimeout(None)
            up = socket.create_connection(self._upstream)
            with self._mu:
                self._accepted += 1
                self._open.append(down)
                t = threading.Thread(target=self._pump, args=(down, up), name="conn-counter-pump", daemon=True)
                self._threads.append(t)
            t.start()

    def _pump(self, down: socket.socket, up: socket.socket) -> None:
        pair = {down: up, up: down}
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select(list(pair), [], [], 0.05)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    pair[s].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            with self._mu:
                if down in self._open:
                    self._open.remove(down)
            for s in (down, up):
                try:
                    s.close()
                except OSError:
                    pass

    def drop(self, reset: bool = False) -> None:
        """Closes every connection it holds, from the server's side: a FIN,
        or with reset a RST (as a crashed or impatient middlebox sends), and
        returns once they are closed."""
        with self._mu:
            conns = list(self._open)
        for s in conns:
            try:
                if reset:
                    # Closed with a zero linger time, the socket sends RST;
                    # shutting down its reading side wakes its pump to close it.
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    s.shutdown(socket.SHUT_RD)
                else:
                    s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with self._mu:
                if not any(s in self._open for s in conns):
                    return
            time.sleep(0.01)
        raise AssertionError("the forwarder's connections did not close")

    def close(self) -> None:
        self._stop.set()
        for t in list(self._threads):
            t.join()
        self._listener.close()


# -- a stub transport --------------------------------------------------------------


class Request:
    def __init__(self, method: str, url: str, headers: Dict[str, str], body: Optional[bytes], timeout: float) -> None:
        self.method = method
        self.url = url
        self.path = urllib.parse.urlsplit(url).path
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.raw = body
        self.body = json.loads(body) if body else None
        self.timeout = timeout
        self.at = time.monotonic()

    def __repr__(self) -> str:
        return f"{self.method} {self.path} {self.body}"


class Stub:
    """A transport that records every request and answers with handler(req)."""

    def __init__(self, handler: Callable[[Request], Response]) -> None:
        self.handler = handler
        self.requests: List[Request] = []
        self._mu = threading.Lock()

    def __call__(self, method, url, headers, body, timeout):  # the Transport signature
        req = Request(method, url, headers, body, timeout)
        with self._mu:
            self.requests.append(req)
        return self.handler(req)

    def sent(self, method: Optional[str] = None, suffix: str = "") -> List[Request]:
        with self._mu:
            return [r for r in self.requests if (method is None or r.method == method) and r.path.endswith(suffix)]


def answer(status: int, doc: Any = None, headers: Optional[Dict[str, str]] = None, raw: Optional[bytes] = None) -> Response:
    body = raw if raw is not None else (b"" if doc is None else json.dumps(doc).encode())
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return Response(status, h, body)


_serial = itertools.count(1)


def lock_doc(resource: str, owner: str, token: Optional[int] = None, ttl: int = 30) -> Dict[str, Any]:
    now = time.time()

    def fmt(t: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"

    return {
        "resource": resource, "owner": owner, "fencing_token": token or next(_serial),
        "acquired_at": fmt(now), "expires_at": fmt(now + ttl),
    }


def grant(req: Request, token: Optional[int] = None) -> Response:
    """The service's answer to an acquire request that succeeded."""
    resource = urllib.parse.unquote(req.path.split("/")[2])
    return answer(200, {"acquired": True, "lock": lock_doc(resource, req.body["owner"], token, req.body["ttl_seconds"])})


def renewed(req: Request) -> Response:
    """The service's answer to a renew request that succeeded."""
    resource = urllib.parse.unquote(req.path.split("/")[2])
    lock = lock_doc(resource, req.body["owner"], req.body.get("fencing_token"), req.body["ttl_seconds"])
    return answer(200, {"renewed": True, "lock": lock})


def held(req: Request, headers: Optional[Dict[str, str]] = None, **extra: Any) -> Response:
    resource = urllib.parse.unquote(req.path.split("/")[2])
    return answer(200, dict({"acquired": False, "resource": resource}, **extra), headers)


def problem(status: int, slug: str, **extra: Any) -> Response:
    doc = {"type": "https://ft288.dev/problems/" + slug, "title": slug, "status": status, "detail": "d", "instance": "/x"}
    headers = extra.pop("headers", None)
    doc.update(extra)
    return answer(status, doc, headers)


# -- no thread outlives its test ---------------------------------------------------


def lease_threads() -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(("ft288-locks-lease:", "ft288-locks-set:")) and t.is_alive()]


class TestCase(unittest.TestCase):
    """Fails a test that leaves a lease thread running (after its cleanups)."""

    def setUp(self) -> None:
        super().setUp()
        self.addCleanup(self._check_threads)  # runs last: cleanups are LIFO

    def _check_threads(self) -> None:
        deadline = time.monotonic() + 2
        while lease_threads() and time.monotonic() < deadline:
            time.sleep(0.01)
        left = lease_threads()
        if left:
            self.fail(f"lease threads still running after the test: {[t.name for t in left]}")

    def keep(self, lease):
        """Releases lease when the test ends, whatever state it is in."""
        def release() -> None:
            try:
                lease.release()
            except Exception:
                pass
        self.addCleanup(release)
        return lease
