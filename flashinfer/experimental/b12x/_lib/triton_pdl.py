"""Programmatic dependent launch (PDL, sm_90+) for Triton kernels that more than one group launches.

A kernel compiled with Triton's `launch_pdl` option is launched with the programmatic stream
serialization attribute: its programs may become resident while the kernel before it on the stream
still runs (under CUDA graph capture the attribute becomes a programmatic edge). Such a kernel calls
`gdc_enter(PDL)` before its first global access: `griddepcontrol.wait` returns once the kernel before
it has completed and its writes are visible, and `griddepcontrol.launch_dependents` then lets the
next PDL kernel launch its programs (which wait likewise). Since every PDL kernel waits before
reading, data written by any earlier kernel of the chain is visible to it.

PDL is a constexpr: with 0 the kernel's code is what it was without PDL. The CPU interpreter has no
griddepcontrol, so callers pass 0 there (the math is the same).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def gdc_enter(PDL: tl.constexpr):
    """Wait for the kernel before this one, then (PDL 1) release the next one (module docstring); PDL 2
    waits only, so the next kernel launches as this one's programs exit; nothing when PDL is 0. Call before
    the first global access."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        if PDL == 1:
            tl.extra.cuda.gdc_launch_dependents()
