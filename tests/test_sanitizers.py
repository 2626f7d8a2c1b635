"""The C core under the sanitizers and valgrind, without Python in the way.

Builds tests/c/test_core_c.c (planner, sweep, model, topology, pool,
simulators, many threads), tests/c/test_step_c.c (cluster, collectives,
work model, schedules and the training-step engine) and fuzz/fuzz_profile.c (replaying the committed
fuzz corpus) directly against the core's .c files (csrc/*/ but module/) and runs them:

* AddressSanitizer + UndefinedBehaviorSanitizer, -fno-sanitize-recover=all,
  so any report fails the run;
* ThreadSanitizer (the pool, concurrent planning, sweeps and simulations),
  halt_on_error=1;
* valgrind memcheck: no invalid access, no uninitialised use, no leak.

A missing compiler, sanitizer runtime or valgrind skips the test, unless
HPGO_REQUIRE_SANITIZERS=1 (CI sets it) turns the skip into a failure."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from csrc_paths import core_sources, include_flags, src

ROOT = Path(__file__).resolve().parents[1]
CORE = core_sources()
FLAGS = ["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Wshadow", "-Werror",
         "-Wno-missing-field-initializers",
         "-fno-omit-frame-pointer", "-D_POSIX_C_SOURCE=200809L", *include_flags()]
LIBS = ["-lm", "-pthread"]
PROFILES = [str(ROOT / "profiles" / "transformer36-v100" / "graph.txt"),
            str(ROOT / "profiles" / "branchy-mlp-cpu" / "graph.txt")]
REQUIRED = os.environ.get("HPGO_REQUIRE_SANITIZERS") == "1"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux toolchain only")


def _unavailable(why):
    if REQUIRED:
        pytest.fail(f"HPGO_REQUIRE_SANITIZERS=1 but {why}")
    pytest.skip(why)


def _cc():
    for cc in (os.environ.get("CC"), "gcc", "cc", "clang"):
        if cc and shutil.which(cc):
            return cc
    _unavailable("no C compiler")


def _build(tmp_path, name, sources, extra):
    exe = tmp_path / name
    cmd = [_cc(), *FLAGS, *extra, *sources, "-o", str(exe), *LIBS]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        if "-fsanitize" in " ".join(extra) and ("cannot find" in r.stderr
                                                or "unrecognized" in r.stderr
                                                or "unsupported" in r.stderr):
            _unavailable(f"sanitizer runtime missing: {r.stderr[-300:]}")
        pytest.fail(f"build failed:\n{' '.join(cmd)}\n{r.stderr[-4000:]}")
    return exe


def _run(cmd, env=None, timeout=600):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-6000:]}"
    return r


def _checks(stdout):
    line = stdout.strip().splitlines()[-1]
    assert line.startswith("ok "), stdout
    return int(line.split()[1])


ASAN = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
ASAN_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}


def test_core_under_address_and_undefined_sanitizers(tmp_path):
    exe = _build(tmp_path, "core_asan", [str(ROOT / "tests" / "c" / "test_core_c.c"), *CORE], ASAN)
    r = _run([exe, *PROFILES], env=ASAN_ENV)
    assert _checks(r.stdout) > 10000
    assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr


def test_core_under_thread_sanitizer(tmp_path):
    exe = _build(tmp_path, "core_tsan", [str(ROOT / "tests" / "c" / "test_core_c.c"), *CORE],
                 ["-fsanitize=thread"])
    r = _run([exe, *PROFILES], env={"TSAN_OPTIONS": "halt_on_error=1:second_deadlock_stack=1"})
    if "FATAL: ThreadSanitizer: unexpected memory mapping" in r.stderr:
        _unavailable("ThreadSanitizer cannot run here (address space layout)")
    assert _checks(r.stdout) > 10000
    assert "ThreadSanitizer" not in r.stderr, r.stderr


def _valgrind():
    vg = shutil.which("valgrind")
    if not vg:
        _unavailable("valgrind is not installed")
    return [vg, "--tool=memcheck", "--leak-check=full",
            "--show-leak-kinds=definite,indirect,possible",
            "--errors-for-leak-kinds=definite,indirect,possible", "--track-origins=yes",
            "--error-exitcode=99", "-q"]


def test_core_under_valgrind_memcheck(tmp_path):
    exe = _build(tmp_path, "core_vg", [str(ROOT / "tests" / "c" / "test_core_c.c"), *CORE], [])
    r = _run([*_valgrind(), exe, "--quick", *PROFILES], timeout=900)
    assert _checks(r.stdout) > 5000


STEP_TEST = str(ROOT / "tests" / "c" / "test_step_c.c")


def test_step_engine_under_address_and_undefined_sanitizers(tmp_path):
    exe = _build(tmp_path, "step_asan", [STEP_TEST, *CORE], ASAN)
    r = _run([exe], env=ASAN_ENV)
    assert _checks(r.stdout) > 10000
    assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr


def test_step_engine_under_thread_sanitizer(tmp_path):
    exe = _build(tmp_path, "step_tsan", [STEP_TEST, *CORE], ["-fsanitize=thread"])
    r = _run([exe, "--quick"], env={"TSAN_OPTIONS": "halt_on_error=1"})
    if "FATAL: ThreadSanitizer: unexpected memory mapping" in r.stderr:
        _unavailable("ThreadSanitizer cannot run here (address space layout)")
    assert _checks(r.stdout) > 1000
    assert "ThreadSanitizer" not in r.stderr, r.stderr


def test_step_engine_under_valgrind_memcheck(tmp_path):
    exe = _build(tmp_path, "step_vg", [STEP_TEST, *CORE], [])
    r = _run([*_valgrind(), exe, "--quick"], timeout=900)
    assert _checks(r.stdout) > 1000


def test_profile_reader_under_valgrind_memcheck(tmp_path):
    srcs = [str(ROOT / "tests" / "c" / "test_profile_c.c")] + [
        str(src(f)) for f in ("graph.c", "states.c", "err.c")]
    exe = _build(tmp_path, "profile_vg", srcs, [])
    seeds = [str(ROOT / "tests" / "corpus" / f) for f in ("ok_lf.txt", "ok_duplicate_edges.txt")]
    r = _run([*_valgrind(), exe, *seeds], timeout=900)
    assert _checks(r.stdout) == 3000 * len(seeds)


def test_fuzz_corpus_replays_clean_under_asan(tmp_path):
    """The libFuzzer harness with a plain main: every committed seed and crash
    reproducer goes through reader, state builder and model under
    ASan + UBSan (no clang needed)."""
    srcs = [str(ROOT / "fuzz" / "fuzz_profile.c"), str(ROOT / "fuzz" / "run_corpus.c")] + [
        str(src(f)) for f in ("graph.c", "states.c", "model.c", "err.c")]
    exe = _build(tmp_path, "fuzz_replay", srcs, ASAN)
    corpus = [ROOT / "fuzz" / "corpus", ROOT / "tests" / "corpus", ROOT / "tests" / "corpus_robust"]
    r = _run([exe, *corpus], env=ASAN_ENV)
    n = sum(len(list(c.iterdir())) for c in corpus)
    assert _checks(r.stdout) == n and n >= 100
