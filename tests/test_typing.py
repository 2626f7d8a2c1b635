"""Type stubs: mypy accepts a typed use of the public API, rejects wrong uses,
and the stub of the C extension lists everything the extension has."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from hpgo import _core
from optional_deps import need

TYPING = ROOT / "tests" / "typing"
CONFIG = TYPING / "mypy.ini"
STUB = ROOT / "hpgo" / "_core.pyi"


def mypy(*files):
    need("mypy")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(CONFIG),
                           "--no-incremental", "--cache-dir", os.devnull, *map(str, files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def test_py_typed_marker_and_stub_ship():
    assert (ROOT / "hpgo" / "py.typed").is_file()
    assert STUB.is_file()
    text = (ROOT / "pyproject.toml").read_text()
    assert '"py.typed"' in text and '"*.pyi"' in text


def test_stub_lists_the_extension():
    tree = ast.parse(STUB.read_text())
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    names |= {n.target.id for n in tree.body
              if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    public = {n for n in dir(_core) if not n.startswith("__")}
    assert public - names == set()
    for cls in ("Model", "Devices", "AsyncOrchestrate", "Candidate", "Layer", "SimResult"):
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        members = {getattr(b, "name", None) for b in node.body} | {
            getattr(getattr(b, "target", None), "id", None) for b in node.body}
        real = {a for a in dir(getattr(_core, cls)) if not a.startswith("_")}
        real -= set(dir(tuple))  # count / index of the struct sequences come from tuple
        assert real - members == set(), cls


def test_typed_usage_checks_and_runs():
    r = mypy(TYPING / "usage.py", STUB, ROOT / "hpgo" / "plan.py", ROOT / "hpgo" / "plot.py",
             ROOT / "hpgo" / "dot.py", ROOT / "hpgo" / "cli.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout
    run = subprocess.run([sys.executable, str(TYPING / "usage.py")], cwd=ROOT, timeout=300,
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_wrong_uses_are_rejected():
    misuse = TYPING / "misuse.py"
    marked = [i for i, line in enumerate(misuse.read_text().splitlines(), 1) if "# E:" in line]
    r = mypy(misuse)
    assert r.returncode == 1
    flagged = {int(line.split(":")[1]) for line in r.stdout.splitlines() if ": error:" in line}
    assert flagged == set(marked), r.stdout
