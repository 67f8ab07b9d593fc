"""Holder A of Kleppmann's scenario (tests/test_fence.py), a process of its
own so that the test can pause it with SIGSTOP.

    python3 _fence_holder.py ENDPOINT RESOURCE DB fenced|unfenced

Takes the lock (TTL 2 s, keep-alive on), checks the lease, prints
``{"ready": TOKEN}`` and blocks reading stdin: a pause between its last check
and its write, where the test stops it past its lease. On a line from stdin
it writes row 1 of DB's table ``reports`` with its token, as a holder that
does not know it was paused would, and prints the outcome as one JSON line.
"""

import json
import sqlite3
import sys

from ft288_locks import Client, FencedError
from ft288_locks.fence import sql_fence


def main() -> None:
    endpoint, resource, db, mode = sys.argv[1:5]
    client = Client(endpoint)
    lease = client.try_acquire(resource, ttl=2)
    lease.check()
    print(json.dumps({"ready": lease.fencing_token}), flush=True)

    sys.stdin.readline()  # paused here, its lease running out
    conn = sqlite3.connect(db, timeout=10)
    try:
        if mode == "fenced":
            try:
                sql_fence(conn.cursor(), lease.fencing_token, "reports", set={"body": "A"}, where={"id": 1})
                conn.commit()
                outcome = {"wrote": True}
            except FencedError as e:
                conn.rollback()
                outcome = {"wrote": False, "fenced": str(e)}
        else:
            cur = conn.execute("UPDATE reports SET body = ?, fence = ? WHERE id = ?", ("A", lease.fencing_token, 1))
            conn.commit()
            outcome = {"wrote": cur.rowcount == 1}
    finally:
        conn.close()
    try:
        lease.release()  # the lease ran out while it was stopped: this finds it gone
    except Exception as e:
        outcome["release"] = type(e).__name__
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
