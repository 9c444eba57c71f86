"""b12x.attention: Paged and sparse-MLA attention.

Ops are resolved lazily from the root registry (`b12x.list_ops()`).
"""

from .._lib.group import group_attributes

__getattr__, __dir__ = group_attributes(__name__, globals())
