"""b12x.gemm: Quantized GEMM (NVFP4, MXFP4, MXFP8, block/tensor FP8) and the linear layers.

Ops are resolved lazily from the root registry (`b12x.list_ops()`).
"""

from .._lib.group import group_attributes

__getattr__, __dir__ = group_attributes(__name__, globals())
