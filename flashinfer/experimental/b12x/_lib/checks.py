"""Host-side checks of caller tensors shared by every group, so their errors read the same.

Each error names the argument, what was expected and what came (`describe` writes the last part).
Stdlib only at import: torch is imported inside the functions that need it, because op packages'
`__init__` must stay light and some callers validate before torch is otherwise loaded.
"""

from __future__ import annotations


def describe(t) -> str:
    """What came, for an error message: 'bfloat16 [M, K] on cuda:0 (non-contiguous)', or the type
    name of something that is not a tensor."""
    import torch

    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    extra = "" if t.is_contiguous() else " (non-contiguous)"
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)} on {t.device}{extra}"


def _tracing() -> bool:
    """Under torch.compile's trace tensors have no addresses: the address checks wait for the op's own call
    (every b12x entry point that torch.compile traces ends in a custom op that runs the eager checks)."""
    import torch

    return torch.compiler.is_compiling()


def check_aligned(name: str, t, align: int) -> None:
    """ValueError unless `t` starts `align`-byte aligned (compiled kernels assume it for vector
    loads and TMA; a misaligned start faults or reads the wrong bytes instead of failing cleanly)."""
    if _tracing():
        return
    if t.data_ptr() % align:
        raise ValueError(f"{name} must start {align}-byte aligned, got address {t.data_ptr():#x}")


def check_disjoint(*named, rule: str) -> None:
    """ValueError when two of the (name, tensor) pairs share bytes; `rule` ends the message (what
    must be disjoint). Kernels that read one buffer while writing another assume no aliasing, and
    an overlap gives silently wrong results rather than an error. Empty tensors never overlap."""
    if _tracing():
        return
    spans = [(n, t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for n, t in named if t.numel()]
    for i, (a, a0, a1) in enumerate(spans):
        for b, b0, b1 in spans[i + 1 :]:
            if a0 < b1 and b0 < a1:
                raise ValueError(f"{a} and {b} overlap in memory; {rule}")
