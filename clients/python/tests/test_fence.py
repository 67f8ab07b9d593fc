"""The fence helpers (ft288_locks.fence), and Kleppmann's scenario end to end
against the local runner and SQLite: holder A is paused (SIGSTOP) past its
lease, B takes the lock over and writes, A resumes and writes with its old
token. With the fence the row keeps B's write; without it A's overwrites it."""

from __future__ import annotations

import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import ft288_locks as fl
from ft288_locks import Client, FencedError, InvalidRequest
from ft288_locks.fence import DynamoFence, check_fenced, dynamo_fence, sql_fence, sql_fence_statement

from tests._support import REPO_ROOT, Runner, TestCase, resource_name, shared_runner

HOLDER = Path(__file__).with_name("_fence_holder.py")


class DynamoFenceTests(TestCase):
    def test_fragments(self):
        f = dynamo_fence(42)
        self.assertIsInstance(f, DynamoFence)
        self.assertEqual(f.condition, "attribute_not_exists(#fence) OR #fence <= :fence")
        self.assertEqual(f.update, "SET #fence = :fence")
        self.assertEqual(f.set_action, "#fence = :fence")
        self.assertEqual(f.names, {"#fence": "fence"})
        self.assertEqual(f.values, {":fence": {"N": "42"}})
        self.assertEqual(f.document_values, {":fence": 42})
        self.assertEqual(dynamo_fence(7, attribute="lock_token").names, {"#fence": "lock_token"})
        for bad in (0, -1, 1.0, "42", True, None):
            with self.subTest(token=bad), self.assertRaises(InvalidRequest):
                dynamo_fence(bad)
        with self.assertRaises(InvalidRequest):
            dynamo_fence(1, attribute="")

    def test_merge_update(self):
        f = dynamo_fence(9)
        cases = [
            (None, "SET #fence = :fence"),
            ("SET body = :b", "SET body = :b, #fence = :fence"),
            ("set body = :b  remove old", "set body = :b, #fence = :fence remove old"),
            ("REMOVE old ADD n :one", "SET #fence = :fence REMOVE old ADD n :one"),
            ("ADD n :one SET #s = :add, address = :set", "ADD n :one SET #s = :add, address = :set, #fence = :fence"),
        ]
        for expr, want in cases:
            params = {"TableName": "t", "Key": {"id": {"S": "r1"}}}
            if expr is not None:
                params["UpdateExpression"] = expr
            with self.subTest(expr=expr):
                self.assertEqual(f.merge_update(params)["UpdateExpression"], want)

        params = {
            "TableName": "t", "Key": {"id": {"S": "r1"}}, "UpdateExpression": "SET #b = :b",
            "ConditionExpression": "attribute_exists(id)",
            "ExpressionAttributeNames": {"#b": "body"}, "ExpressionAttributeValues": {":b": {"S": "x"}},
        }
        before = json.dumps(params, sort_keys=True)
        out = f.merge_update(params)
        self.assertEqual(json.dumps(params, sort_keys=True), before, "the caller's parameters are not changed")
        self.assertEqual(out["ConditionExpression"],
                         "(attribute_exists(id)) AND (attribute_not_exists(#fence) OR #fence <= :fence)")
        self.assertEqual(out["ExpressionAttributeNames"], {"#b": "body", "#fence": "fence"})
        self.assertEqual(out["ExpressionAttributeValues"], {":b": {"S": "x"}, ":fence": {"N": "9"}})
        self.assertEqual((out["TableName"], out["Key"]), ("t", {"id": {"S": "r1"}}))
        doc = f.merge_update({"Key": {"id": "r1"}, "UpdateExpression": "SET body = :b",
                              "ExpressionAttributeValues": {":b": "x"}}, document=True)
        self.assertEqual(doc["ExpressionAttributeValues"], {":b": "x", ":fence": 9})

        with self.assertRaises(InvalidRequest):
            f.merge_update({"ExpressionAttributeNames": {"#fence": "other"}})
        with self.assertRaises(InvalidRequest):
            f.merge_update({"ExpressionAttributeValues": {":fence": {"N": "1"}}})

    def test_merge_put(self):
        f = dynamo_fence(9, attribute="tok")
        item = {"id": {"S": "r1"}, "body": {"S": "x"}}
        out = f.merge_put({"TableName": "t", "Item": item})
        self.assertEqual(out["Item"], {"id": {"S": "r1"}, "body": {"S": "x"}, "tok": {"N": "9"}})
        self.assertNotIn("tok", item)
        self.assertEqual(out["ConditionExpression"], "attribute_not_exists(#fence) OR #fence <= :fence")
        self.assertEqual(out["ExpressionAttributeNames"], {"#fence": "tok"})
        self.assertEqual(f.merge_put({"Item": {"id": "r1"}}, document=True)["Item"], {"id": "r1", "tok": 9})


class SqlFenceTests(TestCase):
    def test_statement_in_each_paramstyle(self):
        want_sql = "UPDATE s.reports SET body = {}, fence = {} WHERE id = {} AND part IS NULL AND (fence IS NULL OR fence <= {})"
        for style, marks, params in (
            ("qmark", ["?"] * 4, ("B", 7, 1, 7)),
            ("format", ["%s"] * 4, ("B", 7, 1, 7)),
            ("numeric", [":1", ":2", ":3", ":4"], ("B", 7, 1, 7)),
            ("named", [":p1", ":p2", ":p3", ":p4"], {"p1": "B", "p2": 7, "p3": 1, "p4": 7}),
            ("pyformat", ["%(p1)s", "%(p2)s", "%(p3)s", "%(p4)s"], {"p1": "B", "p2": 7, "p3": 1, "p4": 7}),
        ):
            with self.subTest(paramstyle=style):
                sql, got = sql_fence_statement(7, "s.reports", set={"body": "B"}, where={"id": 1, "part": None},
                                               paramstyle=style)
                self.assertEqual(sql, want_sql.format(*marks))
                self.assertEqual(got, params)
        sql, _ = sql_fence_statement(3, "jobs", set={}, where={"id": 1}, column="tok")
        self.assertEqual(sql, "UPDATE jobs SET tok = ? WHERE id = ? AND (tok IS NULL OR tok <= ?)")

    def test_refuses_what_it_cannot_build_safely(self):
        ok = dict(set={"body": "B"}, where={"id": 1})
        for kw in (dict(table="reports; DROP TABLE x"), dict(table='"reports"'), dict(table="a.b.c"),
                   dict(set={"body = 1, x": 2}), dict(where={"id OR 1=1 --": 1}), dict(where={}),
                   dict(set={"fence": 1}), dict(column="fence x"), dict(paramstyle="dollar"), dict(token=0)):
            args = dict(ok, table="reports", token=5)
            args.update(kw)
            with self.subTest(**{k: repr(v) for k, v in kw.items()}), self.assertRaises(InvalidRequest):
                sql_fence_statement(args.pop("token"), args.pop("table"), **args)

    def test_sqlite_refuses_an_older_token(self):
        conn = sqlite3.connect(":memory:")
        self.addCleanup(conn.close)
        conn.execute("CREATE TABLE reports (id INTEGER PRIMARY KEY, body TEXT, fence INTEGER)")
        conn.execute("INSERT INTO reports (id, body) VALUES (1, 'initial')")
        cur = conn.cursor()
        self.assertEqual(sql_fence(cur, 5, "reports", set={"body": "five"}, where={"id": 1}), 1)
        self.assertEqual(sql_fence(cur, 5, "reports", set={"body": "five again"}, where={"id": 1}), 1)
        self.assertEqual(sql_fence(cur, 7, "reports", set={"body": "seven"}, where={"id": 1}), 1)
        with self.assertRaises(FencedError) as ctx:
            sql_fence(cur, 6, "reports", set={"body": "six"}, where={"id": 1})
        self.assertEqual(ctx.exception.token, 6)
        self.assertIsInstance(ctx.exception, fl.LockError)
        self.assertIn("newer fencing token than 6", str(ctx.exception))
        self.assertEqual(conn.execute("SELECT body, fence FROM reports WHERE id = 1").fetchone(), ("seven", 7))
        with self.assertRaises(FencedError):  # no such row
            sql_fence(cur, 8, "reports", set={"body": "eight"}, where={"id": 2})

    def test_check_fenced_needs_a_row_count(self):
        class Cursor:
            rowcount = -1

        with self.assertRaises(RuntimeError):
            check_fenced(Cursor(), 1)
        Cursor.rowcount = 2
        self.assertEqual(check_fenced(Cursor(), 1), 2)


RUNNER: Runner


def setUpModule() -> None:
    global RUNNER
    RUNNER = shared_runner()


class KleppmannTests(TestCase):
    """Kleppmann's scenario, twice at once on two locks and two databases:
    with the fence and without it. Holder A (tests/_fence_holder.py, a
    process) takes the lock with a 2 s TTL, checks its lease and is stopped
    before its write. B's acquire waits at the service until A's lease runs
    out — the one deliberate pause — and B writes. A resumes and writes with
    its old token."""

    def test_a_paused_holder_is_fenced_off_and_without_the_fence_overwrites(self):
        client = Client(RUNNER.url, backoff=(0.02, 0.2))
        runs = {mode: self.start_holder(mode) for mode in ("fenced", "unfenced")}
        for run in runs.values():
            run["token_a"] = self.line_from(run["a"])["ready"]
            os.kill(run["a"].pid, signal.SIGSTOP)  # paused between its check and its write
            self.assertEqual(client.status(run["resource"]).fencing_token, run["token_a"])  # A's lease is live

        for mode, run in runs.items():
            # B waits at the service until A's lease runs out (A cannot renew it).
            b = self.keep(client.acquire(run["resource"], wait=30, ttl=30))
            self.assertGreater(b.fencing_token, run["token_a"])
            run["token_b"] = b.fencing_token
            with sqlite3.connect(run["db"]) as conn:
                if mode == "fenced":
                    sql_fence(conn.cursor(), b.fencing_token, "reports", set={"body": "B"}, where={"id": 1})
                else:
                    conn.execute("UPDATE reports SET body = ?, fence = ? WHERE id = ?", ("B", b.fencing_token, 1))
            conn.close()

        for run in runs.values():
            os.kill(run["a"].pid, signal.SIGCONT)
            run["a"].stdin.write(b"write\n")
            run["a"].stdin.flush()
        for mode, run in runs.items():
            run["outcome"] = self.line_from(run["a"])
            self.assertEqual(run["a"].wait(30), 0, mode)
            with sqlite3.connect(run["db"]) as conn:
                run["row"] = conn.execute("SELECT body, fence FROM reports WHERE id = 1").fetchone()
            conn.close()

        fenced, unfenced = runs["fenced"], runs["unfenced"]
        # The fence refused A's write: the row holds B's.
        self.assertFalse(fenced["outcome"]["wrote"], fenced["outcome"])
        self.assertIn("fenced off", fenced["outcome"]["fenced"])
        self.assertEqual(fenced["row"], ("B", fenced["token_b"]))
        # Without it, A's write overwrote B's: the corruption the fence prevents.
        self.assertTrue(unfenced["outcome"]["wrote"], unfenced["outcome"])
        self.assertEqual(unfenced["row"], ("A", unfenced["token_a"]))

    def start_holder(self, mode: str) -> dict:
        tmp = tempfile.TemporaryDirectory(prefix="ft288-locks-fence-")
        self.addCleanup(tmp.cleanup)
        db = os.path.join(tmp.name, "reports.db")
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE reports (id INTEGER PRIMARY KEY, body TEXT, fence INTEGER)")
            conn.execute("INSERT INTO reports (id, body) VALUES (1, 'initial')")
        conn.close()
        resource = resource_name(self)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCKS_", "PYTHON"))}
        env.update(PYTHONPATH=str(REPO_ROOT / "clients" / "python"), PYTHONDONTWRITEBYTECODE="1")
        a = subprocess.Popen(
            [sys.executable, str(HOLDER), RUNNER.url, resource, db, mode],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )

        def end() -> None:
            if a.poll() is None:
                a.send_signal(signal.SIGCONT)
                a.kill()
            a.wait()
            for f in (a.stdin, a.stdout, a.stderr):
                f.close()

        self.addCleanup(end)
        return {"a": a, "db": db, "resource": resource}

    def line_from(self, a: subprocess.Popen) -> dict:
        """A's next line, waited for on its stdout."""
        ready, _, _ = select.select([a.stdout], [], [], 30)
        line = a.stdout.readline() if ready else b""
        if not line:
            a.kill()
            self.fail(f"holder A said nothing (exit {a.wait()}):\n{a.stderr.read().decode(errors='replace')}")
        return json.loads(line)


if __name__ == "__main__":
    unittest.main()
