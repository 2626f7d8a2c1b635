#!/usr/bin/env bash
# The Python test suite against an AddressSanitizer + UndefinedBehaviorSanitizer
# build of hpgo._core, in a scratch copy of the checkout (the C-level runs under
# ASan/UBSan, TSan and valgrind are tests/test_sanitizers.py, part of pytest).
# The interpreter is not instrumented, so the sanitizer runtimes are preloaded;
# leak detection is off here because CPython keeps memory until exit (the C
# tests check leaks with LeakSanitizer and valgrind, tests/test_robust_memory.py
# checks the glue).  Any report aborts the run.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/hpgo"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/hpgo"
else
    cp -a . "$work/hpgo"
fi
# tests find ../shared beside the checkout
if [ -d ../shared ]; then ln -s "$(cd ../shared && pwd)" "$work/shared"; fi
cd "$work/hpgo"
HPGO_SANITIZE=address,undefined HPGO_WERROR=1 python3 setup.py -q build_ext --inplace 2>&1 \
    | grep -v -i "deprecat\|^\s*!!\|^\s*\*\*\*\|^$\|corresp\|license\|See https" || true
test -n "$(ls hpgo/_core*.so)"
cc="$(python3 -c 'import sysconfig; print((sysconfig.get_config_var("CC") or "gcc").split()[0])')"
asan="$("$cc" -print-file-name=libasan.so)"
ubsan="$("$cc" -print-file-name=libubsan.so)"
LD_PRELOAD="$asan $ubsan" \
ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1" \
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    python3 -m pytest -q -p no:cacheprovider tests \
        --ignore=tests/test_sanitizers.py --ignore=tests/test_profiler.py \
        --ignore=tests/test_profiler_cli.py
