"""b12x.norm: Normalisation and hyper-connection ops.

Ops are resolved lazily from the root registry (`b12x.list_ops()`).
"""

from .._lib.group import group_attributes

__getattr__, __dir__ = group_attributes(__name__, globals())
