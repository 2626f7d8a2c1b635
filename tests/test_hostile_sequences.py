"""Sequences whose items run Python code while they are converted (a
__float__ that empties the list being read) must not crash the C glue of the
DynPipe / HAP entry points; each call runs in a child so a crash fails."""
import subprocess
import sys
import textwrap

import pytest

CALLS = [
    "_core.split_batch(100000, victim)",
    "_core.replan_score(victim, list(victim_copy), [0.0] * len(victim_copy), 4)",
    "_core.hap_shard_round(1 << 20, victim)",
]


@pytest.mark.parametrize("call", CALLS)
def test_item_conversion_that_mutates_the_list(call):
    code = textwrap.dedent(
        f"""
        from hpgo import _core
        class Evil:
            def __float__(self):
                victim.clear()
                return 2.0
        victim = [1.0, Evil(), 3.0] + [4.0] * 1000
        victim_copy = [1.0, 2.0, 3.0] + [4.0] * 1000
        try:
            {call}
        except (ValueError, TypeError) as e:
            print("error", e)
        print("survived")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert "survived" in r.stdout
