"""Build and run the C tests of the profile reader (tests/c/test_profile_c.c)
against the core sources, under AddressSanitizer + UBSan when the compiler
has them.  Skipped when no C compiler is available."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from csrc_paths import include_flags, src

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "tests" / "c" / "test_profile_c.c", src("graph.c"), src("states.c"),
           src("err.c")]
FLAGS = ["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Wshadow", "-Werror",
         "-D_POSIX_C_SOURCE=200809L", *include_flags()]
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=undefined"]


def compiler():
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def build(cc, out, extra):
    cmd = [cc, *FLAGS, *extra, *map(str, SOURCES), "-o", str(out), "-lm"]
    return subprocess.run(cmd, capture_output=True, text=True)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX only")
def test_c_api_and_mutation_fuzz(tmp_path):
    cc = compiler()
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "test_profile_c"
    res = build(cc, exe, SANITIZE)
    if res.returncode != 0:  # no sanitizer runtime: plain build
        res = build(cc, exe, [])
    assert res.returncode == 0, res.stderr
    seeds = sorted(str(p) for p in (ROOT / "tests" / "corpus").glob("ok_*.txt"))
    assert seeds
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    run = subprocess.run([str(exe), *seeds], capture_output=True, text=True, timeout=300,
                         env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.stdout.startswith("ok ")
    assert int(run.stdout.split()[1]) == 3000 * len(seeds)
