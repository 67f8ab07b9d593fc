"""Python client of the ft288 lock service: leased, owner-checked locks over
HTTP with fencing tokens.

    from ft288_locks import Client

    client = Client.from_env()  # LOCKS_ENDPOINT, default http://127.0.0.1:8080
    with client.lock("nightly-report") as lease:  # waits up to 30 s, always released
        for part in parts:
            lease.check()  # raises LeaseLostError once the lock may be gone
            write_part(part, fencing_token=lease.fencing_token)

Semaphores: ``with client.semaphore("exports", 3) as permit:`` holds one of
3 permits (``permit.slot``, ``permit.fencing_token``; fence per slot).
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
from ._args import MAX_PERMITS, default_owner
from ._defaults import (
    DEFAULT_ACQUIRE_WAIT,
    DEFAULT_BACKOFF,
    DEFAULT_ENDPOINT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_IDLE,
    DEFAULT_TIMEOUT,
    DEFAULT_TTL,
    DEFAULT_USER_AGENT,
    DELIVERY_ALLOWANCE,
    MAX_SERVER_WAIT,
    RELEASE_RETRY_TIMEOUT,
)
from ._http import NotSent, PooledTransport, Response, UrllibTransport
from ._model import (
    AdminLock,
    AdminPermit,
    ForceReleased,
    Lock,
    LockPage,
    PermitForceReleased,
    PermitInfo,
    PermitPage,
    QueueEntry,
    SemaphoreStatus,
    SemaphoreWatchResult,
    WatchResult,
)
from .client import Client
from .election import Election, Leader, Observation
from .errors import (
    PROBLEM_TYPE_BASE,
    AcquireTimeout,
    FieldError,
    FencedError,
    ForbiddenError,
    FullError,
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
    PermitsMismatchError,
    ProblemError,
    SigningError,
    SigV4Unavailable,
    StaleTokenError,
    TransportError,
    UnavailableError,
    ValidationError,
    deprecated_alias,
)
from .lease import Lease, Permit
from .lockset import MAX_SET_NAMES, LockSet, LockSetError, LockSetHeldError
from .rwlock import (
    MAX_READERS,
    AdminRWLease,
    AdminRWLock,
    AdminRWQueueEntry,
    RWForceReleased,
    RWLease,
    RWLeaseInfo,
    RWLockPage,
    RWQueueEntry,
    RWStatus,
    RWWatchResult,
)

__version__ = "0.1.0"

__all__ = [
    "AcquireTimeout",
    "AdminLock",
    "QueueEntry",
    "AdminPermit",
    "Client",
    "DEFAULT_ACQUIRE_WAIT",
    "DEFAULT_BACKOFF",
    "DEFAULT_ENDPOINT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_IDLE",
    "DEFAULT_TIMEOUT",
    "DEFAULT_TTL",
    "DEFAULT_USER_AGENT",
    "DELIVERY_ALLOWANCE",
    "Election",
    "FencedError",
    "FieldError",
    "ForbiddenError",
    "ForceReleased",
    "FullError",
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
    "LockSet",
    "LockSetError",
    "LockSetHeldError",
    "LockPage",
    "MAX_LIST_LIMIT",
    "MAX_PERMITS",
    "MAX_READERS",
    "MAX_SET_NAMES",
    "MAX_SERVER_WAIT",
    "NotFoundError",
    "NotSent",
    "Observation",
    "PROBLEM_TYPE_BASE",
    "PayloadTooLarge",
    "Permit",
    "PermitForceReleased",
    "PermitInfo",
    "PermitPage",
    "PermitsMismatchError",
    "PooledTransport",
    "ProblemError",
    "RELEASE_RETRY_TIMEOUT",
    "RWLease",
    "RWLeaseInfo",
    "RWQueueEntry",
    "RWStatus",
    "AdminRWLease",
    "AdminRWLock",
    "AdminRWQueueEntry",
    "RWForceReleased",
    "RWLockPage",
    "RWWatchResult",
    "Response",
    "SemaphoreStatus",
    "SemaphoreWatchResult",
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
