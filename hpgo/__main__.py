"""``python -m hpgo``: the same command line as the ``hpgo`` script."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
