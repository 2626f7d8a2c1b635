#!/usr/bin/env bash
# The README's two quick-start commands, exactly as the README writes them (the
# first two ```sh blocks), in a fresh clone of this checkout and a fresh
# virtualenv with no extras: what a new user runs first.  Tests that need an
# optional package must skip here, and pass.  ../shared stays resolvable from
# the clone (a link beside it) when the checkout has one.
set -euo pipefail
cd "$(dirname "$0")/.."
src="$(pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$src" "$work/hpgo"
if [ -d ../shared ]; then ln -s "$(cd ../shared && pwd)" "$work/shared"; fi
python3 - "$src/README.md" "$work" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
blocks = re.findall(r"```sh\n(.*?)```", text, re.S)[:2]
assert len(blocks) == 2, "README.md: expected the quick start's two ```sh blocks"
for i, b in enumerate(blocks, 1):
    cmd = b.strip()
    assert "\n" not in cmd, f"README.md quick-start block {i} must be one command line"
    open(f"{sys.argv[2]}/cmd{i}.sh", "w").write(cmd + "\n")
PY
python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
unset HPGO_REQUIRE_EXTRAS HPGO_REQUIRE_SANITIZERS PYTHONPATH
export PIP_DISABLE_PIP_VERSION_CHECK=1
cd "$work/hpgo"
for i in 1 2; do
    echo "+ $(cat "$work/cmd$i.sh")"
    bash -euo pipefail "$work/cmd$i.sh"
done
