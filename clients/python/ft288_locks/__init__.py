"""Python client of the ft288 lock service: leased, owner-checked locks over
HTTP with fencing tokens.

    from ft288_locks import Client, Held

    client = Client("http://127.0.0.1:8080")
    with client.lock("nightly-report", ttl=30) as lease:
        write_report(fencing_token=lease.fencing_token)
"""

from .client import DEFAULT_BACKOFF, DEFAULT_TIMEOUT, DEFAULT_USER_AGENT, MAX_SERVER_WAIT, Client, Lock, default_owner
from ._http import Response
from .errors import (
    PROBLEM_TYPE_BASE,
    AcquireTimeout,
    FieldError,
    Forbidden,
    GatewayError,
    GatewayRejected,
    GatewayUnavailable,
    Held,
    InternalError,
    InvalidJSON,
    InvalidRequest,
    LeaseExpired,
    LeaseLost,
    LeaseReleased,
    LockError,
    NotFound,
    PayloadTooLarge,
    ProblemError,
    ServiceUnavailable,
    SigningError,
    SigV4Unavailable,
    StaleToken,
    TransportError,
    ValidationFailed,
)
from .lease import RELEASE_RETRY_TIMEOUT, Lease

__version__ = "0.1.0"

__all__ = [
    "AcquireTimeout",
    "Client",
    "DEFAULT_BACKOFF",
    "DEFAULT_TIMEOUT",
    "DEFAULT_USER_AGENT",
    "FieldError",
    "Forbidden",
    "GatewayError",
    "GatewayRejected",
    "GatewayUnavailable",
    "Held",
    "InternalError",
    "InvalidJSON",
    "InvalidRequest",
    "Lease",
    "LeaseExpired",
    "LeaseLost",
    "LeaseReleased",
    "Lock",
    "LockError",
    "MAX_SERVER_WAIT",
    "NotFound",
    "PROBLEM_TYPE_BASE",
    "PayloadTooLarge",
    "ProblemError",
    "RELEASE_RETRY_TIMEOUT",
    "Response",
    "ServiceUnavailable",
    "SigV4Unavailable",
    "SigningError",
    "StaleToken",
    "TransportError",
    "ValidationFailed",
    "default_owner",
]
