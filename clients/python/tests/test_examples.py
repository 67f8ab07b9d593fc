"""Every Python example of the documents runs as pasted: each ```python (or
```py) block of the README, of every document in docs/ and of the client's
README is run as a program against the local runner, with only
LOCKS_ENDPOINT set. None is skipped; a block that is not a program must be
fenced otherwise (```text)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import List, NamedTuple

from tests._support import REPO_ROOT, Runner, TestCase, shared_runner

DOCUMENTS = (
    "README.md",
    *sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "docs").glob("*.md")),
    "clients/python/README.md",
)
PYTHON_FENCES = ("python", "py", "python3", "py3")
PACKAGE_DIR = REPO_ROOT / "clients" / "python"

RUNNER: Runner


def setUpModule() -> None:
    global RUNNER
    RUNNER = shared_runner()


class Example(NamedTuple):
    document: str
    line: int  # of the opening fence
    code: str


_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)")


def examples(document: str) -> List[Example]:
    """The Python blocks of a document, in order. A fence whose info string
    starts with "py" but is none of PYTHON_FENCES (```pycon, ```python-repl)
    is an error: it would hide a block from this test."""
    out = []
    lines = (REPO_ROOT / document).read_text(encoding="utf-8").split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        lang = lang.lower()
        if lang in PYTHON_FENCES:
            out.append(Example(document, start + 1, "\n".join(body) + "\n"))
        elif lang.startswith("py"):
            raise AssertionError(f"{document}:{start + 1}: fence ```{lang}: use ```python for a program, ```text otherwise")
    return out


class ExampleTests(TestCase):
    def test_extraction(self):
        found = {d: len(examples(d)) for d in DOCUMENTS}
        # The README has one, docs/clients.md two, the client's README seven:
        # fewer means the extraction (or a document) lost some.
        self.assertGreaterEqual(found["README.md"], 1, found)
        self.assertGreaterEqual(found["docs/clients.md"], 2, found)
        self.assertGreaterEqual(found["clients/python/README.md"], 7, found)

    def test_every_python_example_runs_against_the_local_runner(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCKS_", "AWS_", "PYTHON"))}
        env.update(LOCKS_ENDPOINT=RUNNER.url, PYTHONPATH=str(PACKAGE_DIR), PYTHONDONTWRITEBYTECODE="1")
        with tempfile.TemporaryDirectory(prefix="ft288-locks-examples-") as tmp:
            for document in DOCUMENTS:
                for ex in examples(document):
                    with self.subTest(example=f"{ex.document}:{ex.line}"):
                        script = Path(tmp, f"{Path(ex.document).stem}_{ex.line}.py")
                        script.write_text(ex.code, encoding="utf-8")
                        try:
                            proc = subprocess.run(
                                [sys.executable, "-W", "error::DeprecationWarning", str(script)],
                                cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=90,
                            )
                        except subprocess.TimeoutExpired as e:
                            self.fail(f"{ex.document}:{ex.line}: still running after 90 s:\n{(e.output or b'').decode(errors='replace')}")
                        out = proc.stdout.decode(errors="replace")
                        self.assertEqual(proc.returncode, 0, f"{ex.document}:{ex.line} failed:\n{out}\n--- the example:\n{ex.code}")


if __name__ == "__main__":
    unittest.main()
