"""Compatibility package: `import b12x` keeps working for applications.

This file is installed as the top-level package `b12x`. It is replaced at import time by the real
root, `flashinfer/experimental/b12x/_api.py`, so `b12x` and `flashinfer.experimental.b12x` are one
module and every `b12x.X` is the same object as `flashinfer.experimental.b12x.X`.
"""

import sys

from flashinfer.experimental.b12x._lib.identity import check_no_foreign_b12x

check_no_foreign_b12x()

import flashinfer.experimental.b12x as _root  # noqa: E402

sys.modules[__name__] = _root
