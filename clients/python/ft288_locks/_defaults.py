"""The client's tunables, each documented once: the same values as the Go and
TypeScript clients (docs/clients.md, "One family")."""

DEFAULT_ENDPOINT = "http://127.0.0.1:8080"
"""Client.from_env()'s endpoint when LOCKS_ENDPOINT is unset: what `make run`
serves."""

DEFAULT_TTL = 30
"""A lease's time-to-live in whole seconds when the call names none."""

DEFAULT_ACQUIRE_WAIT = 30.0
"""How long acquire() and lock() wait for a held lock, in seconds, when the
call names no ``wait`` (``wait=None``: until the lock is free)."""

RELEASE_RETRY_TIMEOUT = 10.0
"""How long Lease.release() retries temporary failures (503, throttling, no
answer), in seconds, unless it is given another timeout."""

DELIVERY_ALLOWANCE = 0.005
"""How long before a lease's local deadline its thread ends it, in seconds
(5 ms): ``lost`` is then normally set, and its waiters woken, before the
deadline. ``check()``, ``held`` and ``lost.is_set()`` compare the clock with
the deadline itself."""

DEFAULT_TIMEOUT = 30.0
"""Bounds one HTTP exchange, in seconds (a server-side wait is added to it)."""

DEFAULT_BACKOFF = (0.05, 2.0)
"""First retry delay's upper bound and the cap of every delay (and of
Retry-After), in seconds."""

MAX_SERVER_WAIT = 20
"""The longest wait_seconds the service accepts. A round is shorter for a
short lease: see Client.acquire."""

DEFAULT_USER_AGENT = "ft288-locks-python-client/1"

DEFAULT_MAX_IDLE = 10
"""How many idle keep-alive connections a client keeps per host."""

DEFAULT_IDLE_TIMEOUT = 30.0
"""An idle connection older than this many seconds is closed rather than
reused, before a server or load balancer may drop it under a request."""
