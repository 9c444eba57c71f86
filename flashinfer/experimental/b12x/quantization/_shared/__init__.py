"""Pieces shared within the quantization group only (other groups use `_lib`).

`_triton_helpers`: Triton device functions both activation quantizers inline (NaN-ignoring block
amax, 128x4 swizzled scale offsets). A kernel that imports them names the module in its compile
decorator's `sources=` so an edit here changes the kernel's fingerprint.

`_host`: host code both quantizers' api.py share (launcher cache, device key, timing, the checks
of caller tensors); no kernel code.
"""
