"""HPGO: the name DAPPLE's examples import; the same package as ``hpgo``."""
import sys as _sys

import hpgo as _hpgo

_sys.modules[__name__] = _hpgo
