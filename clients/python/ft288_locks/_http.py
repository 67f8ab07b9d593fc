"""HTTP plumbing: the default transport over urllib, and parsing helpers."""

from __future__ import annotations

import datetime as _dt
import email.utils
import re
import urllib.error
import urllib.request
from typing import Callable, Mapping, Optional

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
# it raises OSError (or http.client.HTTPException) when there is none.
Transport = Callable[[str, str, Mapping[str, str], Optional[bytes], float], Response]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # The API never redirects; a redirect (a misconfigured proxy or URL)
    # must surface as an error answer, not be followed with a changed method.
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[override]
        return None


class UrllibTransport:
    """The default transport: one urllib request per call, honouring the
    usual proxy environment variables (HTTPS_PROXY, NO_PROXY, ...)."""

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
