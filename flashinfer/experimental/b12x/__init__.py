"""flashinfer.experimental.b12x: this package's root module is `_api.py`.

Importing this package replaces it in `sys.modules` with `_api` (which takes this folder as its
`__path__`), under both `flashinfer.experimental.b12x` and `b12x`. See `_lib/identity.py`.
"""

import sys

from . import _api
from ._lib.identity import install_alias

_api.__path__ = __path__  # submodules (gemm, _lib, ...) resolve from this folder
install_alias(_api)
del sys
