"""HTTP plumbing: the transports (pooled keep-alive connections by default,
or urllib), and parsing helpers."""

from __future__ import annotations

import base64
import datetime as _dt
import email.utils
import http.client
import os
import re
import select
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from ._defaults import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_IDLE

# Bounds how much of a response body is read.
MAX_RESPONSE_BYTES = 1 << 20


class Response:
    """One HTTP answer, whatever its status. ``headers`` has lower-case names."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.status = status
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.body = body


# A transport sends one request and returns the answer, whatever its status;
# it raises OSError (or http.client.HTTPException) when there is none, and
# NotSent (an OSError) when the request certainly did not reach the server.
Transport = Callable[[str, str, Mapping[str, str], Optional[bytes], float], Response]


class NotSent(ConnectionError):
    """The request certainly did not reach the server: the connection could not
    be made, or failed before the whole request was written (a server acts on
    a request only once it has all of it)."""


def _describe(e: BaseException) -> str:
    if isinstance(e, socket.timeout):
        return "timed out"
    return str(e) or type(e).__name__


class PooledTransport:
    """The default transport: HTTP/1.1 keep-alive connections (http.client),
    pooled per scheme and host, so that a client's calls and its leases'
    renewals reuse a few connections rather than open one per request.

    Safe for use from several threads: a connection serves one request at a
    time, taken from the pool (or newly opened) and put back once its answer
    has been read; at most ``max_idle`` idle connections are kept per host,
    none longer than ``idle_timeout`` seconds. A pooled connection the server
    has closed is noticed before it is used (the socket reads as ready), and
    a reused connection that fails before the whole request was written is
    replaced by a new one and the request sent again, since the server cannot
    have acted on it; a failure after that is raised (the caller's retries
    decide). Proxies come from the usual environment variables (HTTP_PROXY,
    HTTPS_PROXY, NO_PROXY), as for urllib; an https endpoint is reached
    through a CONNECT tunnel. Redirects are not followed: the API never
    redirects, and a redirect (a misconfigured proxy or URL) surfaces as an
    error answer."""

    def __init__(
        self,
        max_idle: int = DEFAULT_MAX_IDLE,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        if not (isinstance(max_idle, int) and max_idle >= 0):
            raise ValueError(f"max_idle {max_idle!r}: want a whole number, 0 or more")
        if not idle_timeout >= 0:
            raise ValueError(f"idle_timeout {idle_timeout!r}: want seconds, 0 or more")
        self.max_idle = max_idle
        self.idle_timeout = float(idle_timeout)
        self._ssl = ssl_context
        self._mu = threading.Lock()
        self._idle: Dict[Tuple[str, str], List[Tuple[http.client.HTTPConnection, float]]] = {}
        self._routes: Dict[Tuple[str, str], "_Route"] = {}
        self._pid = os.getpid()

    def __call__(self, method: str, url: str, headers: Mapping[str, str], body: Optional[bytes], timeout: float) -> Response:
        u = urllib.parse.urlsplit(url)
        key = (u.scheme, u.netloc)
        route = self._route(key, u)
        target = route.target(u)
        headers = dict(headers, **route.headers)
        while True:
            conn, reused = self._checkout(key, route)
            try:
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                conn.request(method, target, body=body, headers=headers)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if reused:
                    continue  # a stale keep-alive connection: the request was not all written
                raise NotSent(_describe(e)) from e
            except BaseException:
                conn.close()
                raise
            try:
                resp = conn.getresponse()
                data = resp.read(MAX_RESPONSE_BYTES)
                # The rest of a chunked body is its last chunk; anything
                # more is beyond the bound: the connection cannot be reused.
                done = resp.isclosed() or (not resp.read(1) and resp.isclosed())
            except BaseException:
                conn.close()
                raise
            self._checkin(key, conn, done)
            return Response(resp.status, dict(resp.getheaders()), data)

    def close(self) -> None:
        """Closes the idle connections. The transport can still be used: it
        opens new ones (and pools a connection in use when its request is
        done)."""
        with self._mu:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn, _ in conns:
                conn.close()

    def __del__(self) -> None:
        # A client dropped without close(): its idle sockets are closed now,
        # not whenever the collector gets to them (and without a warning).
        try:
            self.close()
        except Exception:
            pass

    def _route(self, key: Tuple[str, str], u: urllib.parse.SplitResult) -> "_Route":
        with self._mu:
            route = self._routes.get(key)
        if route is None:
            route = _Route(u, self._ssl)
            with self._mu:
                self._routes[key] = route
        return route

    def _checkout(self, key: Tuple[str, str], route: "_Route") -> Tuple[http.client.HTTPConnection, bool]:
        """An idle connection that is still open, or a new one (not yet
        connected); and whether it was reused."""
        stale = []
        try:
            with self._mu:
                if self._pid != os.getpid():  # a forked child must not share its parent's sockets
                    self._pid, self._idle = os.getpid(), {}
                idle = self._idle.get(key, [])
                now = time.monotonic()
                while idle:
                    conn, since = idle.pop()
                    if now - since <= self.idle_timeout and conn.sock is not None and not _readable(conn.sock):
                        return conn, True
                    stale.append(conn)
        finally:
            for conn in stale:
                conn.close()
        return route.connection(), False

    def _checkin(self, key: Tuple[str, str], conn: http.client.HTTPConnection, done: bool) -> None:
        if done and conn.sock is not None:  # a "Connection: close" answer has closed it
            with self._mu:
                idle = self._idle.setdefault(key, [])
                if len(idle) < self.max_idle:
                    idle.append((conn, time.monotonic()))
                    return
        conn.close()


class _Route:
    """How to reach one scheme://host:port: directly or through a proxy."""

    def __init__(self, u: urllib.parse.SplitResult, ssl_context: Optional[ssl.SSLContext]) -> None:
        self.https = u.scheme == "https"
        self.host = u.hostname or ""
        self.port = u.port or (443 if self.https else 80)
        self.ssl = ssl_context
        self.proxy: Optional[Tuple[str, int]] = None
        self.headers: Dict[str, str] = {}  # added to every request (an http proxy's credentials)
        self.tunnel_headers: Dict[str, str] = {}
        proxy = urllib.request.getproxies().get(u.scheme)
        if proxy and not urllib.request.proxy_bypass(u.netloc):
            p = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
            self.proxy = (p.hostname or "", p.port or 80)
            auth = {}
            if p.username is not None:
                creds = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}"
                auth["Proxy-Authorization"] = "Basic " + base64.b64encode(creds.encode()).decode()
            if self.https:
                self.tunnel_headers = auth
            else:
                self.headers = auth

    def target(self, u: urllib.parse.SplitResult) -> str:
        """The request target: the path, or the absolute URL for an http proxy."""
        path = (u.path or "/") + ("?" + u.query if u.query else "")
        if self.proxy is not None and not self.https:
            return f"{u.scheme}://{u.netloc}{path}"
        return path

    def connection(self) -> http.client.HTTPConnection:
        host, port = self.proxy or (self.host, self.port)
        if not self.https:
            return http.client.HTTPConnection(host, port)
        conn = http.client.HTTPSConnection(host, port, context=self.ssl or ssl.create_default_context())
        if self.proxy is not None:
            conn.set_tunnel(self.host, self.port, headers=self.tunnel_headers)
        return conn


def _readable(sock: socket.socket) -> bool:
    """Whether an idle connection's socket has something to read: the server
    closed it (or sent what it should not have). Either way, not reusable."""
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock, select.POLLIN)
            return bool(p.poll(0))
        r, _, _ = select.select([sock], [], [], 0)
        return bool(r)
    except (OSError, ValueError):
        return True


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # The API never redirects; a redirect (a misconfigured proxy or URL)
    # must surface as an error answer, not be followed with a changed method.
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[override]
        return None


class UrllibTransport:
    """One urllib request per call, a new connection each time; the default
    before connections were pooled (PooledTransport). It honours the same
    proxy environment variables."""

    def __init__(self) -> None:
        self._opener = urllib.request.build_opener(_NoRedirect())

    def __call__(self, method: str, url: str, headers: Mapping[str, str], body: Optional[bytes], timeout: float) -> Response:
        req = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
        try:
            resp = self._opener.open(req, timeout=timeout)
        except urllib.error.HTTPError as e:  # a non-2xx answer is still an answer
            try:
                data = e.read(MAX_RESPONSE_BYTES) if e.fp is not None else b""
            finally:
                e.close()
            return Response(e.code, dict(e.headers.items()) if e.headers else {}, data)
        with resp:
            return Response(resp.status, dict(resp.headers.items()), resp.read(MAX_RESPONSE_BYTES))


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """The delay of a Retry-After header (delay-seconds or an HTTP-date) in
    seconds, capped at a day; None when absent or malformed."""
    if value is None:
        return None
    v = value.strip()
    if not v:
        return None
    if v.isdigit():
        return float(min(int(v), 24 * 3600))
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    return min(max(0.0, (when - _dt.datetime.now(_dt.timezone.utc)).total_seconds()), 24 * 3600.0)


_RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:([Zz])|([+-])(\d\d):(\d\d))\Z"
)


def parse_time(value: object) -> Optional[_dt.datetime]:
    """An RFC 3339 timestamp as an aware datetime; None when malformed.
    (datetime.fromisoformat only learned the "Z" suffix in Python 3.11.)"""
    if not isinstance(value, str):
        return None
    m = _RFC3339.match(value)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    micro = int((m.group(7) or "0").ljust(6, "0")[:6])
    if m.group(8):
        tz = _dt.timezone.utc
    else:
        offset = _dt.timedelta(hours=int(m.group(10)), minutes=int(m.group(11)))
        tz = _dt.timezone(-offset if m.group(9) == "-" else offset)
    try:
        return _dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError:
        return None
