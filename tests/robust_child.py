"""Run a snippet of Python in a child interpreter, so that a crash, a hang
or a runaway allocation fails one test instead of taking pytest down.

The child imports hpgo from this checkout, runs the snippet, and prints one
JSON line with what the snippet stored in ``result`` plus its peak resident
memory (VmHWM of /proc/self/status, which starts afresh at exec, unlike
ru_maxrss).  An address-space limit (RLIMIT_AS) is set in the child unless
the interpreter runs under AddressSanitizer (which reserves terabytes of
virtual memory)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")

_PRELUDE = """
import json, sys
sys.path.insert(0, {root!r})
result = {{}}
def _peak_mb():
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
"""

_EPILOGUE = """
result['_peak_mb'] = _peak_mb()
print('@@RESULT@@' + json.dumps(result))
"""


@dataclass
class Child:
    returncode: int
    result: dict
    stdout: str
    stderr: str

    @property
    def peak_mb(self) -> float:
        return self.result.get("_peak_mb", float("nan"))

    def describe(self) -> str:
        return (f"rc={self.returncode}\nstdout:\n{self.stdout[-3000:]}\n"
                f"stderr:\n{self.stderr[-3000:]}")


def run_child(code: str, *, timeout: float = 120, address_space_mb: int | None = 4096,
              env: dict | None = None) -> Child:
    """Run `code` (dedented) in a fresh interpreter with cwd = the checkout.
    Raises subprocess.TimeoutExpired on a hang (the child is killed)."""
    src = _PRELUDE.format(root=str(ROOT)) + textwrap.dedent(code) + _EPILOGUE
    limit = None if UNDER_ASAN or sys.platform != "linux" else address_space_mb

    def preexec():  # runs in the child between fork and exec
        if limit:
            import resource
            b = limit * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (b, b))

    proc = subprocess.run([sys.executable, "-c", src], cwd=str(ROOT), capture_output=True,
                          text=True, timeout=timeout, preexec_fn=preexec,
                          env=dict(os.environ, **(env or {})))
    result: dict = {}
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            result = json.loads(line[len("@@RESULT@@"):])
    return Child(proc.returncode, result, proc.stdout, proc.stderr)
