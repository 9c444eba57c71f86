"""`python -m b12x` / `python -m flashinfer.experimental.b12x`: see `_cli.py`."""

import sys

from flashinfer.experimental.b12x._cli import main

sys.exit(main())
