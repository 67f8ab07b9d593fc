"""The package installs as Python users expect: an sdist, and from it a
wheel, built with Debian's Python and no package index (setuptools, wheel,
pip), installed into a fresh venv, where a script using it runs against the
local runner.

The builder is /usr/bin/python3 (Debian 12: python3-setuptools 66,
python3-wheel, python3-pip, python3-venv), or LOCKS_PACKAGING_PYTHON. The
package is copied out first, so that the build leaves nothing in the
checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import textwrap
import unittest
import zipfile
from pathlib import Path
from typing import List

from tests._support import REPO_ROOT, Runner, TestCase, shared_runner

PACKAGE_DIR = REPO_ROOT / "clients" / "python"
BUILDER = os.environ.get("LOCKS_PACKAGING_PYTHON", "/usr/bin/python3")
VERSION = "0.1.0"

RUNNER: Runner


def setUpModule() -> None:
    global RUNNER
    RUNNER = shared_runner()


SCRIPT = textwrap.dedent('''
    import os, sys

    import ft288_locks
    from ft288_locks import Client, HeldError, NotFoundError

    # the installed package, not the checkout
    assert ft288_locks.__file__.startswith(sys.prefix), (ft288_locks.__file__, sys.prefix)
    client = Client.from_env()
    resource = "packaging-" + os.urandom(4).hex()
    with client.lock(resource, ttl=10) as lease:
        assert client.status(resource).fencing_token == lease.fencing_token
        try:
            client.try_acquire(resource)
            raise SystemExit("a second lease on a held lock")
        except HeldError:
            pass
        assert [l.resource for l in client.list_all(resource)] == [resource]
    try:
        client.status(resource)
        raise SystemExit("the lock is still held after the with block")
    except NotFoundError:
        pass
    print("ok", ft288_locks.__version__, lease.fencing_token)
''')


class PackagingTests(TestCase):
    def run_ok(self, args: List[str], cwd: Path, what: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "LOCKS_", "VIRTUAL_ENV"))}
        # No index, no cache in the user's home, no questions.
        env.update(PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
                   PYTHONDONTWRITEBYTECODE="1", LOCKS_ENDPOINT=RUNNER.url)
        proc = subprocess.run(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=300)
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            self.fail(f"{what} failed (exit {proc.returncode}): {' '.join(args)}\n{out}")
        return out

    def test_wheel_from_sdist_installs_into_a_fresh_venv_and_runs(self):
        if not os.access(BUILDER, os.X_OK):
            self.fail(f"{BUILDER} not found: the packaging test needs Debian's python3 (or set LOCKS_PACKAGING_PYTHON)")
        probe = subprocess.run([BUILDER, "-c", "import setuptools, wheel, pip, ensurepip, venv"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if probe.returncode != 0:
            self.fail(
                f"{BUILDER} cannot build and install offline ({probe.stdout.decode(errors='replace').strip()}); on "
                "Debian: apt-get install python3-setuptools python3-wheel python3-pip python3-venv"
            )
        with tempfile.TemporaryDirectory(prefix="ft288-locks-packaging-") as tmp_name:
            tmp = Path(tmp_name)
            src, dist = tmp / "src", tmp / "dist"
            shutil.copytree(PACKAGE_DIR, src, ignore=shutil.ignore_patterns(
                "__pycache__", "*.pyc", "build", "dist", "*.egg-info", "tests"))
            dist.mkdir()

            # The sdist, through setuptools' PEP 517 hook, as `python -m build --no-isolation` calls it.
            self.run_ok([BUILDER, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(dist)!r})"],
                        src, "building the sdist")
            sdists = sorted(dist.glob("*.tar.gz"))
            self.assertEqual(len(sdists), 1, sdists)
            with tarfile.open(sdists[0]) as tar:
                names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
                # The "data" filter where the tarfile module has it (3.12, and backports).
                tar.extractall(tmp / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            for want in ("pyproject.toml", "README.md", "LICENSE", "ft288_locks/__init__.py", "ft288_locks/py.typed"):
                self.assertIn(want, names)

            # The wheel, from the unpacked sdist: the sdist is complete.
            unpacked = next((tmp / "unpacked").iterdir())
            self.run_ok([BUILDER, "-m", "pip", "wheel", "--no-build-isolation", "--no-index", "--no-deps",
                         "-w", str(dist), str(unpacked)], tmp, "building the wheel")
            wheels = sorted(dist.glob("*.whl"))
            self.assertEqual([w.name for w in wheels], [f"ft288_locks-{VERSION}-py3-none-any.whl"])
            with zipfile.ZipFile(wheels[0]) as whl:
                files = set(whl.namelist())
                metadata = whl.read(f"ft288_locks-{VERSION}.dist-info/METADATA").decode()
            modules = {p.name for p in (PACKAGE_DIR / "ft288_locks").glob("*.py")}
            self.assertEqual({f.split("/", 1)[1] for f in files if f.startswith("ft288_locks/")}, modules | {"py.typed"})
            headers = metadata.split("\n\n", 1)[0].split("\n")
            for line in ("Name: ft288-locks", f"Version: {VERSION}", "License: Apache-2.0",
                         "Requires-Python: >=3.9", "Provides-Extra: sigv4"):
                self.assertIn(line, headers)
            # botocore for the sigv4 extra only (spelt "botocore (>=1.20) ; extra == 'sigv4'" by setuptools 66)
            self.assertEqual([h for h in headers if h.startswith("Requires-Dist:")],
                             [h for h in headers if re.fullmatch(r"Requires-Dist: botocore.*extra == [\"']sigv4[\"']", h)])
            self.assertTrue(any(h.startswith("Requires-Dist: botocore") for h in headers), headers)

            # A fresh venv, the wheel installed with the venv's own pip, and
            # a script in a directory of its own (nothing of the checkout on
            # its path).
            venv = tmp / "venv"
            self.run_ok([BUILDER, "-m", "venv", str(venv)], tmp, "creating the venv")
            python = venv / "bin" / "python"
            self.run_ok([str(python), "-m", "pip", "install", "--no-index", "--no-deps", str(wheels[0])], tmp,
                        "installing the wheel")
            work = tmp / "work"
            work.mkdir()
            (work / "use_locks.py").write_text(SCRIPT, encoding="utf-8")
            out = self.run_ok([str(python), "-I", "use_locks.py"], work, "the script in the venv")
            self.assertRegex(out, rf"(?m)^ok {VERSION} \d+$")


if __name__ == "__main__":
    unittest.main()
