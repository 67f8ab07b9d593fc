"""The package installs as Python users expect: an sdist, and from it a
wheel, built with Debian's Python and no package index (setuptools, wheel,
pip), installed into a fresh venv, where a script using it runs against the
local runner. And the install lines of this client's README and of the main
README run as written, offline, in a fresh venv.

The builder is /usr/bin/python3 (Debian 12: python3-setuptools 66,
python3-wheel, python3-pip, python3-venv), or LOCKS_PACKAGING_PYTHON (the
READMEs' lines name /usr/bin/python3 and run as written). The package is
copied out first, so that the build leaves nothing in the checkout."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import unittest
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

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


def sh_block(markdown: str, after: str, what: str) -> str:
    """The first ```sh block of markdown after the text after (a heading, a
    block's opening), or raises an AssertionError naming what."""
    start = markdown.find(after)
    if start < 0:
        raise AssertionError(f"{what}: no {after!r}")
    m = re.compile(r"^```sh\n(.*?)^```", re.M | re.S).search(markdown, start)
    if m is None:
        raise AssertionError(f"{what}: no ```sh block after {after!r}")
    return m.group(1)


class PackagingTests(TestCase):
    def run_ok(self, args: List[str], cwd: Path, what: str, venv: Optional[Path] = None) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "LOCKS_", "VIRTUAL_ENV"))}
        # No index, no cache in the user's home, no questions.
        env.update(PIP_NO_INDEX="1", PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
                   PYTHONDONTWRITEBYTECODE="1", LOCKS_ENDPOINT=RUNNER.url)
        if venv is not None:  # what `. venv/bin/activate` does
            env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
        proc = subprocess.run(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=300)
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            self.fail(f"{what} failed (exit {proc.returncode}): {' '.join(args)}\n{out}")
        return out

    def require_builder(self, builder: str) -> None:
        if not os.access(builder, os.X_OK):
            self.fail(f"{builder} not found: the packaging test needs Debian's python3 (or set LOCKS_PACKAGING_PYTHON)")
        probe = subprocess.run([builder, "-c", "import setuptools, wheel, pip, ensurepip, venv"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if probe.returncode != 0:
            self.fail(
                f"{builder} cannot build and install offline ({probe.stdout.decode(errors='replace').strip()}); on "
                "Debian: apt-get install python3-setuptools python3-wheel python3-pip python3-venv"
            )

    @staticmethod
    def copy_package(dest: Path) -> None:
        shutil.copytree(PACKAGE_DIR, dest, ignore=shutil.ignore_patterns(
            "__pycache__", "*.pyc", "build", "dist", "*.egg-info", "tests"))

    def test_readme_install_lines_run_as_written(self):
        """The install lines of this client's README and of the main README,
        pasted into a shell in a fresh project with a fresh venv active (made
        by the Python running the tests, as a user's would be) and the
        repository at ../locks, offline (PIP_NO_INDEX): each must build the
        wheel and install it; the main README's program then runs against
        the runner."""
        self.require_builder("/usr/bin/python3")  # the lines name it
        readme = (PACKAGE_DIR / "README.md").read_text(encoding="utf-8")
        main = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
        client_lines = sh_block(readme, "\n## Install\n", "clients/python/README.md")
        m = re.search(r"^```python\n((?:(?!^```).)*?)^```\n\n```sh\n(.*?)^```", main, re.M | re.S)
        self.assertIsNotNone(m, "README.md: the Python example, then a ```sh block of its install lines")
        program, main_lines = m.group(1), m.group(2)
        script = re.search(r"^python3 (\S+\.py)\b", main_lines, re.M)
        self.assertIsNotNone(script, f"README.md: the Python install lines run no program:\n{main_lines}")

        with tempfile.TemporaryDirectory(prefix="ft288-locks-readme-") as tmp_name:
            tmp = Path(tmp_name)
            self.copy_package(tmp / "locks" / "clients" / "python")  # the checkout at ../locks
            projects: Dict[str, Path] = {}
            for name, lines in (("client-readme", client_lines), ("main-readme", main_lines)):
                project = projects[name] = tmp / name
                project.mkdir()
                venv = project / ".venv"
                self.run_ok([sys.executable, "-m", "venv", str(venv)], project, f"{name}: creating the venv")
                if name == "main-readme":
                    (project / script.group(1)).write_text(program, encoding="utf-8")
                out = self.run_ok(["bash", "-ec", lines], project, f"{name}: the install lines\n{lines}", venv=venv)
                with self.subTest(name):
                    # Installed into the venv, not found in the checkout.
                    where = self.run_ok([str(venv / "bin" / "python"), "-I", "-c",
                                         "import ft288_locks; print(ft288_locks.__file__)"], tmp, f"{name}: the import")
                    self.assertTrue(where.strip().startswith(str(venv)), f"{name}: ft288_locks from {where.strip()}")
                    if name == "main-readme":
                        self.assertRegex(out, r"(?m)^summary written with fencing token \d+$")
                        self.assertRegex(out, r"(?m)^details written with fencing token \d+$")
            # The Lambda bundle: the package vendored into build/lambda.
            lam = projects["client-readme"] / "build" / "lambda"
            self.assertTrue((lam / "ft288_locks" / "__init__.py").is_file(), f"no ft288_locks in {lam}")
            out = self.run_ok([sys.executable, "-I", "-c",
                               f"import sys; sys.path.insert(0, {str(lam)!r}); import ft288_locks; print(ft288_locks.__file__)"],
                              tmp, "importing the Lambda bundle")
            self.assertTrue(out.strip().startswith(str(lam)), out)

    def test_wheel_from_sdist_installs_into_a_fresh_venv_and_runs(self):
        self.require_builder(BUILDER)
        with tempfile.TemporaryDirectory(prefix="ft288-locks-packaging-") as tmp_name:
            tmp = Path(tmp_name)
            src, dist = tmp / "src", tmp / "dist"
            self.copy_package(src)
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
