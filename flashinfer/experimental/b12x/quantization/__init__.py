"""b12x.quantization: Activation quantizers (NVFP4, MXFP8).

Ops are resolved lazily from the root registry (`b12x.list_ops()`).
"""

from .._lib.group import group_attributes

__getattr__, __dir__ = group_attributes(__name__, globals())
