"""HPGO: the name DAPPLE's examples import; the very same package as ``hpgo``.

``import HPGO`` gives the ``hpgo`` module object itself, and ``HPGO.Layerwise``
/ ``HPGO.Utils`` (the submodule names of HPGO 0.9.3) are importable too.
"""
import sys as _sys

import hpgo as _hpgo

_sys.modules["HPGO.Layerwise"] = _hpgo.Layerwise
_sys.modules["HPGO.Utils"] = _hpgo.Utils
_sys.modules[__name__] = _hpgo
