#!/usr/bin/env bash
# Build the libFuzzer harness with clang: fuzz/build.sh [OUTPUT]  (default /tmp/hpgo_fuzz_profile)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$here/../csrc"
out="${1:-/tmp/hpgo_fuzz_profile}"
"${CLANG:-clang}" -std=c11 -O1 -g -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer -D_POSIX_C_SOURCE=200809L \
    -I"$src" "$here/fuzz_profile.c" "$src/graph.c" "$src/states.c" "$src/model.c" \
    "$src/err.c" -lm -o "$out"
echo "$out"
