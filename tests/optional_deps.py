"""Optional extras in tests: skip when missing, unless HPGO_REQUIRE_EXTRAS=1
(CI sets it after installing them), where a missing extra fails the test."""
import importlib
import os

import pytest


def need(module: str):
    """Import ``module`` or skip (fail under HPGO_REQUIRE_EXTRAS=1)."""
    if os.environ.get("HPGO_REQUIRE_EXTRAS") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module)
