"""Shared fixtures: ../shared (third-party profiles and reference results),
present in CI and absent in a user's clone (tests that need it skip)."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = (ROOT / ".." / "shared").resolve()
sys.path.insert(0, str(Path(__file__).resolve().parent))


def shared_path(*parts):
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs ../shared ({p} is absent)")
    return p


@pytest.fixture
def shared():
    return shared_path()


def chain_model(n_states=60, pbs=1, gbs=64, step=0.01, act=1e6, par=5e6):
    """A synthetic chain model built without any file: state s adds `step`
    seconds, `act` activation bytes and `par` parameter bytes."""
    import hpgo

    ct = [step * (s + 1) for s in range(n_states)]
    ac = [act * (s + 1) for s in range(n_states)]
    pa = [par * (s + 1) for s in range(n_states)]
    oa = [act] * n_states
    preds = [list(range(s)) for s in range(n_states)]
    labels = ["layer_%d" % s for s in range(n_states)]
    return hpgo.model_from_states(ct, ac, pa, oa, preds, labels, pbs, gbs)
