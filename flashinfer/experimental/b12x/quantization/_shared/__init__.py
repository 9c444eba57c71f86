"""Pieces shared within the quantization group only (other groups use `_lib`).

The Triton device functions both quantizers (and moe.fused_moe's gather/requantize) inline live in
`_lib/triton_quant.py`: a kernel that imports them names that module in its compile decorator's
`sources=`, so an edit there changes the kernel's fingerprint.

`_host`: host code both quantizers' api.py share (launcher cache, device key, timing, the checks
of caller tensors); no kernel code.
"""
