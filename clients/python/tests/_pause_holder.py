"""A holder that the pause test (tests/test_pause.py) stops with SIGSTOP past
its lease, a process of its own.

    python3 _pause_holder.py ENDPOINT RESOURCE lock|election

Takes the lock ``with client.lock(...)`` (lock), or campaigns for the
election of that name (election), with a 1 s lease, and runs work steps as
the documentation says: the work's own timer ticks (50 ms), then the
documented check (``lease.check()``; for the election first "do I lead?",
``lease.held``), then a step that writes "working with token N". Each line
on stdout is JSON with ``at``, time.monotonic_ns() (CLOCK_MONOTONIC, which
the test reads too) taken just before the check: a step whose ``at`` is
after the test resumed the process passed its check after the pause. When
the check refuses, it prints ``lost`` with the time it did and exits 0.
"""

import json
import sys
import time

from ft288_locks import Client, LeaseLostError

TICK = 0.05


def emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def lock(client: Client, resource: str) -> None:
    try:
        with client.lock(resource, ttl=1, wait=10) as lease:
            while True:
                time.sleep(TICK)
                at = time.monotonic_ns()
                try:
                    lease.check()
                except LeaseLostError as e:
                    emit(at=time.monotonic_ns(), lost=str(e))
                    raise
                emit(at=at, work=f"working with token {lease.fencing_token}")
    except LeaseLostError:
        pass  # the with block reports the loss again on its way out


def election(client: Client, resource: str) -> None:
    e = client.election(resource)
    lease = e.campaign(ttl=1, timeout=10)
    try:
        while True:
            time.sleep(TICK)
            at = time.monotonic_ns()
            leading = lease.held  # "do I lead?"
            emit(at=at, leader=leading)
            if not leading:
                emit(at=time.monotonic_ns(), lost=repr(lease.reason))
                return
            emit(at=at, work=f"working with token {lease.fencing_token}")
    finally:
        e.resign()


def main() -> None:
    endpoint, resource, mode = sys.argv[1:4]
    client = Client(endpoint, backoff=(0.02, 0.2))
    {"lock": lock, "election": election}[mode](client, resource)


if __name__ == "__main__":
    main()
