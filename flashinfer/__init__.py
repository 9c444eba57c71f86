"""FlashInfer (this tree carries the experimental b12x subsystem).

Importing `flashinfer` stays light: it loads no kernels, no CuTe DSL, no Triton and nothing from
`flashinfer.experimental`. Experimental code is imported only when asked for by name.
"""

from ._version import __version__

__all__ = ["__version__"]
