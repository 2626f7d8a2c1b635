"""The documentation's examples run.

Every fenced ```python block of README.md and docs/*.md runs, in page order
and in one namespace per page (like the cells of a notebook), in a child
process started in a scratch directory, so the examples must work from any
directory.  A block whose first line is a comment

* ``# needs: shared, matplotlib`` runs only where each need is met: ``shared``
  is ../shared beside the checkout (the block's ``../shared/`` paths are made
  absolute), any other word a module that must import (under
  HPGO_REQUIRE_EXTRAS=1 a missing module fails instead of skipping);
* ``# not run`` is a sketch (names the reader fills in) and is skipped.

Also: the README's quick start is the two commands CI runs, and its links
to docs/ pages exist.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, SHARED

PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def blocks(page):
    text = page.read_text(encoding="utf-8")
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 2
        yield line, m.group(1)


def needs(code):
    first = code.lstrip().split("\n", 1)[0].strip()
    if first.startswith("# not run"):
        return None
    m = re.match(r"#\s*needs:\s*(.*)", first)
    return [w.strip() for w in m.group(1).split(",") if w.strip()] if m else []


def missing(need):
    if need == "shared":
        return not SHARED.is_dir()
    if os.environ.get("HPGO_REQUIRE_EXTRAS") == "1":
        return False
    return importlib.util.find_spec(need) is None


RUNNER = r"""
import json, sys, traceback
cells = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
for where, code in cells:
    try:
        exec(compile(code, where, "exec"), ns)
    except BaseException:
        traceback.print_exc()
        print("FAILED in " + where, file=sys.stderr)
        sys.exit(1)
print("ran", len(cells), "blocks")
"""


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_python_examples_run(page, tmp_path):
    cells, skipped = [], []
    for line, code in blocks(page):
        want = needs(code)
        if want is None:
            continue
        gone = [n for n in want if missing(n)]
        if gone:
            skipped.append((line, gone))
            continue
        if "shared" in want:
            code = code.replace("../shared/", str(SHARED) + "/")
        cells.append((f"{page.name}:{line}", code))
    if not cells:
        pytest.skip(f"no block of {page.name} can run here (needs {skipped})")
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    (tmp_path / "run.py").write_text(RUNNER)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "run.py", "cells.json"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-6000:]
    assert f"ran {len(cells)} blocks" in r.stdout


def sh_blocks(text):
    return [b.strip() for b in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)]


def test_readme_quick_start_is_the_two_commands():
    first, second = sh_blocks((ROOT / "README.md").read_text())[:2]
    assert first.startswith("pip install . && hpgo plan ") and "\n" not in first
    assert first.split("hpgo plan ")[1].split()[0] == "profiles/transformer36-v100/graph.txt"
    assert second == "pip install -e '.[test]' && pytest"
    assert (ROOT / ".ci" / "readme-commands.sh").is_file()
    assert ".ci/readme-commands.sh" in (ROOT / ".ci" / "run").read_text()


def test_readme_links_exist():
    text = (ROOT / "README.md").read_text()
    links = set(re.findall(r"\]\(((?:docs|examples|profiles|fuzz)/[^)#]+)\)", text))
    assert "docs/training-model.md" in links        # written by another change
    for link in links - {"docs/training-model.md"}:
        assert (ROOT / link).exists(), link
    for page in ("concepts", "planning", "simulation", "profiles",
                 "replanning-and-heterogeneous", "errors-and-limits", "performance"):
        assert f"docs/{page}.md" in links, page
