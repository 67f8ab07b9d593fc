"""Arguments checked before anything is sent, owners, and paths."""

from __future__ import annotations

import math
import os
import secrets
import socket
import urllib.parse
from typing import Any, Optional, Tuple

from .errors import InvalidRequest


def default_owner() -> str:
    """A new owner string unique to this call: "host:pid:random hex"."""
    host = socket.gethostname()[:200] or "host"
    return f"{host}:{os.getpid()}:{secrets.token_hex(8)}"


def base_url(endpoint: Any) -> str:
    if not isinstance(endpoint, str):
        raise ValueError(f"endpoint {endpoint!r}: want a URL string")
    u = urllib.parse.urlsplit(endpoint)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"endpoint {endpoint!r}: want http(s)://host[:port][/path]")
    if u.query or u.fragment or u.username or u.password:
        raise ValueError(f"endpoint {endpoint!r}: must not have a query, fragment or user info")
    netloc = u.netloc
    # Drop a default port: SigV4 signs the host without it, and http.client
    # would send it in the Host header.
    if (u.scheme, u.port) in (("http", 80), ("https", 443)):
        netloc = netloc.rsplit(":", 1)[0]
    return f"{u.scheme}://{netloc}{u.path.rstrip('/')}"


def escape(resource: str) -> str:
    """A resource as one path segment: the same escaping as the Go client's
    url.PathEscape."""
    return urllib.parse.quote(resource, safe="$&+:=@")


def lock_path(resource: str) -> str:
    return "/locks/" + escape(resource)


def rw_path(name: str) -> str:
    return "/rwlocks/" + escape(name)


def semaphore_path(name: str) -> str:
    return "/semaphores/" + escape(name)


MAX_PERMITS = 100
"""The largest number of permits a semaphore may have (the service's bound)."""


def check_permits(permits: Any) -> int:
    if type(permits) is not int or not 1 <= permits <= MAX_PERMITS:
        raise InvalidRequest(f"permits {permits!r}: want a whole number from 1 to {MAX_PERMITS}")
    return permits


def check_slot(slot: Any) -> int:
    if type(slot) is not int or not 0 <= slot < MAX_PERMITS:
        raise InvalidRequest(f"slot {slot!r}: want a whole number from 0 to {MAX_PERMITS - 1}")
    return slot


def check_resource(resource: Any) -> str:
    if not isinstance(resource, str) or not resource:
        raise InvalidRequest(f"resource {resource!r}: want a non-empty string")
    if "/" in resource or resource in (".", ".."):
        # The service refuses "/" too, but a gateway may route an encoded "/"
        # (or normalise a "." or ".." segment) before the service sees it.
        raise InvalidRequest(f"resource {resource!r}: must not contain '/' or be '.' or '..'")
    return resource


def check_ttl(ttl: Any) -> int:
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl != int(ttl) or ttl < 1:
        raise InvalidRequest(f"ttl {ttl!r}: want a whole number of seconds, at least 1")
    return int(ttl)


def check_wait(wait: Any) -> Optional[float]:
    if wait is not None and (isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0):
        raise InvalidRequest(f"wait {wait!r}: want a number of seconds >= 0, or None")
    return wait


def check_index(index: Any) -> int:
    if type(index) is not int or index < 0:
        raise InvalidRequest(f"index {index!r}: want the index of the last answer (an integer from 0)")
    return index


def check_watch_wait(wait: Any, most: int) -> int:
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not math.isfinite(wait) or wait != int(wait) \
            or not 0 <= wait <= most:
        raise InvalidRequest(f"wait {wait!r}: want a whole number of seconds from 0 to {most}")
    return int(wait)


def check_lock_delay(delay: Any) -> int:
    if delay is None:
        return 0
    if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay != int(delay) or delay < 0:
        raise InvalidRequest(f"lock_delay {delay!r}: want a whole number of seconds, 0 or more")
    return int(delay)


def check_token(token: Any) -> Optional[int]:
    if token is None:
        return None
    if type(token) is not int or token <= 0:
        raise InvalidRequest(f"fencing_token {token!r}: want a positive integer")
    return token


def owner_or_default(owner: Optional[str], required: bool = False) -> Tuple[str, bool]:
    """The owner to use, and whether it was generated here."""
    if owner is None and not required:
        return default_owner(), True
    if not isinstance(owner, str) or not owner.strip():
        raise InvalidRequest(f"owner {owner!r}: want a non-blank string")
    return owner, False


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def env_flag(name: str) -> bool:
    """A yes/no environment variable: 1/true/yes/on or 0/false/no/off (any
    case; unset or empty is no). Anything else is a ValueError rather than a
    silent no."""
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={os.environ[name]!r}: want 1, true, yes, on, or 0, false, no, off")
