"""A paused holder runs no step after it resumes (issue 22), against the local
runner: a holder process (tests/_pause_holder.py) with a 1 s lease runs work
steps, each after the documented check; the test stops it with SIGSTOP,
another owner takes the lock once the lease has run out at the service, and
the test resumes the holder. Its first check after the resume must refuse
(for an election: its first "do I lead?" must say no), so no step runs
after the resume. 20 rounds of each, ten holders at a time on different
locks, with the stop after the first, second or third step. A holder that
loses its lease before the stop (a machine too loaded to renew a 1 s lease
in time) has checked correctly but was not paused: its round starts again,
on a new lock, at most twice."""

from __future__ import annotations

import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional

from ft288_locks import Client

from tests._support import REPO_ROOT, Runner, TestCase, resource_name, shared_runner

HOLDER = Path(__file__).with_name("_pause_holder.py")
ROUNDS = 20
BATCH = 10
ATTEMPTS = 3

RUNNER: Runner


def setUpModule() -> None:
    global RUNNER
    RUNNER = shared_runner()


def proc_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat ('T': stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


class Holder:
    """A holder process and its stdout, one parsed JSON line at a time (None
    at the end)."""

    def __init__(self, mode: str, resource: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCKS_", "PYTHON"))}
        env.update(PYTHONPATH=str(REPO_ROOT / "clients" / "python"), PYTHONDONTWRITEBYTECODE="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(HOLDER), RUNNER.url, resource, mode],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        )
        self.lines: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        self.stderr = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)
        self.stderr = self.proc.stderr.read()

    def next(self) -> Optional[Dict[str, Any]]:
        try:
            return self.lines.get(timeout=30)
        except queue.Empty:
            raise AssertionError("the holder said nothing for 30 s") from None

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        self._reader.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()


@unittest.skipUnless(os.path.exists("/proc/self/stat") and hasattr(signal, "SIGSTOP"), "needs SIGSTOP and /proc")
class PauseTests(TestCase):
    def test_a_lock_holder_stopped_past_its_lease_runs_no_step_after_it_resumes(self):
        self.rounds("lock")

    def test_an_old_leader_stopped_past_its_lease_says_it_does_not_lead_when_it_resumes(self):
        self.rounds("election")

    def rounds(self, mode: str) -> None:
        client = Client(RUNNER.url, backoff=(0.02, 0.2))
        self.addCleanup(client.close)
        results: List[Dict[str, Any]] = []
        with ThreadPoolExecutor(BATCH) as pool:
            for start in range(0, ROUNDS, BATCH):
                results += pool.map(lambda i: self.round(client, mode, i), range(start, min(start + BATCH, ROUNDS)))

        late_steps = sum(r["steps_after_resume"] for r in results)
        restarts = sum(r["restarts"] for r in results)
        signalled = sorted(r["lost_after_resume_ms"] for r in results)
        late_rounds = sum(r["steps_after_resume"] > 0 for r in results)
        print(f"\n{mode}: {ROUNDS} rounds, {late_rounds} with a step after resume "
              f"({late_steps} of {sum(r['steps'] for r in results)} steps); "
              f"loss signalled {signalled[0]:.2f} / {statistics.median(signalled):.2f} / {signalled[-1]:.2f} ms "
              f"(min / median / max) after the resume; {restarts} rounds restarted (lost before the pause)",
              file=sys.stderr)
        for r in results:
            with self.subTest(round=r["round"]):
                self.assertEqual(r["steps_after_resume"], 0, f"a step ran after the resume: {r}")
                self.assertGreaterEqual(r["lost_after_resume_ms"], 0, r)
                if mode == "election":
                    self.assertIs(r["first_leader_sample_after_resume"], False, r)

    def round(self, client: Client, mode: str, i: int) -> Dict[str, Any]:
        for attempt in range(ATTEMPTS):
            try:
                r = self.attempt(client, mode, i)
            except _LostBeforePause:
                if attempt == ATTEMPTS - 1:
                    raise
                continue
            r["restarts"] = attempt
            return r
        raise AssertionError("unreachable")

    def attempt(self, client: Client, mode: str, i: int) -> Dict[str, Any]:
        resource = resource_name(self)
        holder = Holder(mode, resource)
        try:
            # Stop it after its first, second or third step: the tick's phase varies.
            steps = 0
            while steps < 1 + i % 3:
                line = holder.next()
                if line is not None and "lost" in line:
                    raise _LostBeforePause(f"round {i}: the holder lost its lease before the pause: {line}")
                if line is None:
                    raise AssertionError(f"round {i}: the holder ended before the pause: {holder.stderr!r}")
                steps += "work" in line
            os.kill(holder.proc.pid, signal.SIGSTOP)
            end = time.monotonic() + 5
            while (state := proc_state(holder.proc.pid)) != "T":
                if state in ("Z", "X"):
                    # It exited before the stop: after a step, its next
                    # check found the lease lost (a loaded machine).
                    rest = []
                    while (line := holder.next()) is not None:
                        rest.append(line)
                    if any("lost" in line for line in rest):
                        raise _LostBeforePause(f"round {i}: the holder lost its lease before the pause: {rest}")
                    raise AssertionError(f"round {i}: the holder exited before the pause: {rest} {holder.stderr!r}")
                if time.monotonic() > end:
                    raise AssertionError(f"round {i}: the holder did not stop")
                time.sleep(0.002)

            # Another owner: granted once the stopped holder's lease ran out at the service.
            try:
                if mode == "lock":
                    other = client.acquire(resource, wait=15, ttl=5, owner="taker")
                    take_back = other.release
                else:
                    election = client.election(resource)
                    other = election.campaign(owner="taker", ttl=5, timeout=15)
                    take_back = election.resign
            except Exception as e:
                raise AssertionError(f"round {i}: the taker was not granted {resource!r} "
                                     f"after the holder's 1 s lease: {e!r}\n{diagnosis(client, resource)}") from e
            try:
                resumed = time.monotonic_ns()
                os.kill(holder.proc.pid, signal.SIGCONT)
                lines = []
                while True:
                    line = holder.next()
                    if line is None:
                        break
                    lines.append(line)
                self.assertEqual(holder.proc.wait(30), 0, f"round {i}: {holder.stderr!r}")
            finally:
                take_back()
        finally:
            holder.end()

        after = [x for x in lines if x["at"] > resumed]
        lost = [x for x in lines if "lost" in x]
        self.assertEqual(len(lost), 1, f"round {i}: no loss reported: {lines} {holder.stderr!r}")
        samples = [x["leader"] for x in after if "leader" in x]
        return {
            "round": i,
            "steps": steps + sum("work" in x for x in lines),
            "steps_after_resume": sum("work" in x for x in after),
            "lost_after_resume_ms": (lost[0]["at"] - resumed) / 1e6,
            "first_leader_sample_after_resume": samples[0] if samples else None,
            "token": other.fencing_token,
        }


def diagnosis(client: Client, resource: str) -> str:
    """What the runner knows of resource: its status, its listing row (the
    queue), and the runner's log lines of its requests."""
    parts = []
    for what, call in (("status", lambda: client.status(resource)),
                       ("listing", lambda: [r for r in client.list_all(resource) if r.resource == resource])):
        try:
            parts.append(f"{what}: {call()!r}")
        except Exception as e:  # part of the report
            parts.append(f"{what}: {e!r}")
    try:
        with open(RUNNER.log_path, "rb") as f:
            lines = [ln.decode(errors="replace").rstrip() for ln in f if f'"resource":"{resource}"'.encode() in ln]
        parts.append("the runner's log of its requests:\n" + "\n".join(lines[-60:]))
    except OSError as e:
        parts.append(f"the runner's log: {e!r}")
    return "\n".join(parts)


class _LostBeforePause(AssertionError):
    """The holder's check refused before the test could stop it."""


if __name__ == "__main__":
    unittest.main()
