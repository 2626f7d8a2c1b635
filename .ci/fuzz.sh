#!/usr/bin/env bash
# A short libFuzzer run over the profile reader, the state builder and the
# model (fuzz/README.md): .ci/fuzz.sh [SECONDS] (default 60).  A finding fails
# the run and prints the input.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fuzz/build.sh "$work/fuzz_profile" >/dev/null
mkdir "$work/corpus" "$work/findings"
rc=0
"$work/fuzz_profile" -dict=fuzz/profile.dict -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$work/findings/" \
    "$work/corpus" fuzz/corpus >"$work/log" 2>&1 || rc=$?
grep -E "^#[0-9]+.*(DONE|pulse)|stat::|^Done" "$work/log" | tail -n 8
if [ "$rc" != 0 ]; then
    tail -n 60 "$work/log"
    for f in "$work"/findings/*; do
        [ -e "$f" ] || continue
        echo "finding $f (base64):"
        base64 "$f"
    done
    exit "$rc"
fi
