"""``python -m nucleo_trio``: the ``nucleo-trio`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
