#!/usr/bin/env python3
"""Print the zoo-vs-measured validation table (docs/profiles.md, section Validation).

    python benchmarks/validate_zoo.py [PROFILES_DIR]

PROFILES_DIR defaults to ../shared/profiles beside the repository (the
third-party DAPPLE/HPGO profiles, not shipped with hpgo).  Ratios are
zoo / measured; "time" is the sum of forward and backward over all layers.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hpgo.zoo.validation import compare_all, markdown_table  # noqa: E402


def main(argv):
    d = argv[1] if len(argv) > 1 else os.path.join(ROOT, "..", "shared", "profiles")
    if not os.path.isdir(d):
        print(f"validate_zoo.py: no profiles folder {d!r}", file=sys.stderr)
        return 2
    rows = compare_all(d)
    print(markdown_table(rows))
    for r in rows:
        print(f"- {r['case']}: fwd ratio {r['fwd_ratio']:.2f}, bwd ratio {r['bwd_ratio']:.2f}; "
              f"measured act {r['ref_act']:.4g} B vs zoo {r['zoo_act']:.4g} B; "
              f"params {r['ref_params']:.6g} B vs {r['zoo_params']:.6g} B. {r['note']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
