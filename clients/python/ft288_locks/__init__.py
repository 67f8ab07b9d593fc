"""Python client of the ft288 lock service: leased, owner-checked locks over
HTTP with fencing tokens.

    from ft288_locks import Client

    client = Client.from_env()  # LOCKS_ENDPOINT, default http://127.0.0.1:8080
    with client.lock("nightly-report") as lease:  # waits up to 30 s, always released
        write_report(fencing_token=lease.fencing_token)

Leader election on a lock: ``client.election(name)`` (campaign, leader,
observe, resign), built on ``client.watch``. Fences that let the protected
resource refuse a holder whose lease ran out: ``ft288_locks.fence``
(``sql_fence``, ``dynamo_fence``; FencedError).

The names and defaults are those of the Go and TypeScript clients (the
"one family" table of docs/clients.md). The names before it (Held, LeaseLost,
StaleToken, Forbidden, NotFound, ServiceUnavailable, ValidationFailed) still
work, as deprecated aliases of the same classes.
"""

from typing import Any

from ._admin import MAX_LIST_LIMIT
from ._args import default_owner
from ._defaults import (
    DEFAULT_ACQUIRE_WAIT,
    DEFAULT_BACKOFF,
    DEFAULT_ENDPOINT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_IDLE,
    DEFAULT_TIMEOUT,
    DEFAULT_TTL,
    DEFAULT_USER_AGENT,
    MAX_SERVER_WAIT,
    RELEASE_RETRY_TIMEOUT,
)
from ._http import NotSent, PooledTransport, Response, UrllibTransport
from ._model import AdminLock, ForceReleased, Lock, LockPage, WatchResult
from .client import Client
from .election import Election, Leader, Observation
from .errors import (
    PROBLEM_TYPE_BASE,
    AcquireTimeout,
    FieldError,
    FencedError,
    ForbiddenError,
    GatewayError,
    GatewayRejected,
    GatewayUnavailable,
    HeldError,
    InternalError,
    InvalidJSON,
    InvalidRequest,
    LeaseExpired,
    LeaseLostError,
    LeaseReleased,
    LockError,
    NotFoundError,
    PayloadTooLarge,
    ProblemError,
    SigningError,
    SigV4Unavailable,
    StaleTokenError,
    TransportError,
    UnavailableError,
    ValidationError,
    deprecated_alias,
)
from .lease import Lease

__version__ = "0.1.0"

__all__ = [
    "AcquireTimeout",
    "AdminLock",
    "Client",
    "DEFAULT_ACQUIRE_WAIT",
    "DEFAULT_BACKOFF",
    "DEFAULT_ENDPOINT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_IDLE",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "DEFAULT_USER_AGENT",
    "Election",
    "FencedError",
    "FieldError",
    "ForbiddenError",
    "ForceReleased",
    "GatewayError",
    "GatewayRejected",
    "GatewayUnavailable",
    "HeldError",
    "InternalError",
    "InvalidJSON",
    "InvalidRequest",
    "Leader",
    "Lease",
    "LeaseExpired",
    "LeaseLostError",
    "LeaseReleased",
    "Lock",
    "LockError",
    "LockPage",
    "MAX_LIST_LIMIT",
    "MAX_SERVER_WAIT",
    "NotFoundError",
    "NotSent",
    "Observation",
    "PROBLEM_TYPE_BASE",
    "PayloadTooLarge",
    "PooledTransport",
    "ProblemError",
    "RELEASE_RETRY_TIMEOUT",
    "Response",
    "SigV4Unavailable",
    "SigningError",
    "StaleTokenError",
    "TransportError",
    "UnavailableError",
    "UrllibTransport",
    "ValidationError",
    "WatchResult",
    "default_owner",
]


def __getattr__(name: str) -> Any:
    # The names before issue 16's family, with a DeprecationWarning.
    return deprecated_alias(__name__, name)
