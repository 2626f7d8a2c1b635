#!/usr/bin/env bash
# Tools the robustness checks need (docs/errors-and-limits.md): clang for
# the libFuzzer harness and valgrind for memcheck; gcc's ASan/UBSan/TSan
# runtimes come with gcc.  Installs only what is missing.
set -euo pipefail
need=()
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
if ((${#need[@]})); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
clang --version | head -n 1
valgrind --version
