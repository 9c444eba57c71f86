"""The spine shared by every b12x op: metadata, arch, compile cache, launch, scratch, timing.

Modules here are imported on demand; this package's `__init__` imports nothing heavy.
"""
