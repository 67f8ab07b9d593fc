"""Retry policy: backoff delays and which failures are worth repeating."""

from __future__ import annotations

import datetime as _dt
import random
from typing import Optional

from .errors import (
    ForbiddenError,
    HeldError,
    InvalidRequest,
    LockError,
    NotFoundError,
    ProblemError,
    StaleTokenError,
    TransportError,
)


class Backoff:
    """Exponential growth with full jitter: retry ``attempt`` (0-based) waits a
    random time up to min(max, base·2^attempt), raised to ``floor`` (the
    service's hint) when that is larger, but never above max."""

    def __init__(self, base: float, max: float) -> None:
        if not (0 < base <= max):
            raise ValueError(f"backoff ({base}, {max}): want 0 < base <= max")
        self.base = float(base)
        self.max = float(max)

    def delay(self, attempt: int, floor: float = 0.0) -> float:
        ceil = min(self.max, self.base * (2 ** min(attempt, 40)))
        return max(random.uniform(0, ceil), min(max(floor, 0.0), self.max))


def retryable(e: BaseException) -> bool:
    """Whether a failed request may be sent again: transport failures (every
    request of this API is safe to repeat) and temporary answers."""
    if isinstance(e, InvalidRequest):
        return False
    if isinstance(e, ProblemError):
        return e.temporary
    return isinstance(e, TransportError)


def definitive(e: BaseException) -> bool:
    """Whether a renewal's or release's failure means the lease is gone."""
    return isinstance(e, (NotFoundError, ForbiddenError, StaleTokenError))


def maybe_granted(e: BaseException) -> bool:
    """Whether an acquire that failed with e may have been granted all the
    same: no answer, or a 5xx (the store may have written before it failed).
    A 4xx answer never grants; anything that is not a LockError (an
    interrupt, a bug) may have struck with the request in flight."""
    if isinstance(e, TransportError):
        return e.maybe_sent
    if isinstance(e, ProblemError):
        return e.status >= 500
    return not isinstance(e, LockError)


def hint(e: Optional[BaseException]) -> float:
    """The earliest the service suggested trying again after e, in seconds."""
    if isinstance(e, HeldError):
        if e.retry_after is not None:
            return e.retry_after
        if e.expires_at is not None:
            return (e.expires_at - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
        return 0.0
    if isinstance(e, ProblemError) and e.retry_after is not None:
        return e.retry_after
    return 0.0
