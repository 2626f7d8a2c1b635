#!/usr/bin/env bash
# Build the libFuzzer harness with clang: fuzz/build.sh [OUTPUT]  (default /tmp/hpgo_fuzz_profile)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$here/../csrc"
out="${1:-/tmp/hpgo_fuzz_profile}"
"${CLANG:-clang}" -std=c11 -O1 -g -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer -D_POSIX_C_SOURCE=200809L \
    -I"$src/base" -I"$src/hpgo" "$here/fuzz_profile.c" "$src/hpgo/graph.c" \
    "$src/hpgo/states.c" "$src/hpgo/model.c" "$src/base/err.c" -lm -o "$out"
echo "$out"
