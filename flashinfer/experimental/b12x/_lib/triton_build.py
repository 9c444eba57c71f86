"""How b12x builds and launches its Triton kernels: the options every group passes, in one place.

Two ways a Triton kernel runs here:
- through its JIT function (`kernel[grid](...)`, `kernel.warmup(...)`): the options are keyword
  arguments of the launch, and the same options must reach warmup and launch, since they are part of
  Triton's compile key (`jit_options`);
- compiled ahead of time for an architecture without a GPU (`aot_compile`), then loaded once per device
  on its first launch there (`PerDevice`, `device_loader`) and launched on torch's current stream of
  that device (`launch_on_stream`).

Under the CPU interpreter (TRITON_INTERPRET=1, the interpret test tier) there are no compile options
and no griddepcontrol: `jit_options` is empty there and a PDL constexpr is 0 (the math is the same).
A kernel launched as a programmatic dependent (`pdl`) is compiled with `launch_pdl` and enters through
`triton_pdl.gdc_enter(PDL)` with PDL = `pdl_constexpr(pdl)`.
"""

from __future__ import annotations

import os

from .freeze import check_may_resolve

# The Triton target's compute capability of each architecture b12x compiles for (arch.KNOWN_ARCHS).
CC_BY_ARCH = {"sm_90a": 90, "sm_120a": 120, "sm_121a": 121}


def interpreting() -> bool:
    """Whether Triton runs its CPU interpreter (TRITON_INTERPRET set and not "0")."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def pdl_constexpr(pdl: bool, at_exit: bool = False) -> int:
    """A kernel's PDL constexpr: 1 for a programmatic dependent that releases the next kernel after its wait, 2 for one
    that releases it as its programs exit (`triton_pdl.gdc_enter`), 0 otherwise and under the interpreter."""
    return 0 if not pdl or interpreting() else 2 if at_exit else 1


def jit_options(pdl: bool = False, *, fp_fusion: bool) -> dict:
    """Launch / warmup options of a JIT kernel: FMA contraction on or off (`fp_fusion`; Triton 3.9
    warns when it is unset) and `launch_pdl` for a programmatic dependent; {} under the interpreter."""
    if interpreting():
        return {}
    return {"enable_fp_fusion": fp_fusion} | ({"launch_pdl": True} if pdl else {})


def aot_options(num_warps: int, *, pdl: bool = False, fp_fusion: bool = False, maxnreg: int | None = None) -> dict:
    """`triton.compile` options of an ahead-of-time build: one stage (these kernels have no pipelined
    loop), FMA contraction as `fp_fusion`, a register cap when `maxnreg`, `launch_pdl` when `pdl`."""
    options = {"num_warps": num_warps, "num_stages": 1, "enable_fp_fusion": fp_fusion}
    if maxnreg:
        options["maxnreg"] = maxnreg
    if pdl:
        options["launch_pdl"] = True  # the launch carries the programmatic-serialization attribute
    return options


def aot_compile(src, arch: str, options: dict):
    """The Triton CompiledKernel of `src` (an ASTSource) for `arch`, built without a GPU (Triton's
    disk cache keeps it); `options` from `aot_options`."""
    import triton
    from triton.backends.compiler import GPUTarget

    return triton.compile(src, target=GPUTarget("cuda", CC_BY_ARCH[arch], 32), options=options)


def device_loader(compile, first=None):
    """`load(index)` for PerDevice: the first device takes `first` (or what `compile()` builds now), each
    later device its own `compile()` (Triton's disk cache makes that a file read); the module is loaded
    onto the device without launching."""
    todo = [compile() if first is None else first]

    def load(index):
        import torch

        compiled = todo.pop() if todo else compile()
        with torch.cuda.device(index):
            compiled[(1, 1, 1)]  # loads the module on this device without launching
        return compiled

    return load


class PerDevice:
    """A compiled kernel per device: `get(index)` calls `load(index)` on a device's first use and keeps
    what it returns. Loading a module is kernel resolution too: refused while frozen or capturing
    (`freeze.check_may_resolve(op, ...)`, the error naming `key`)."""

    def __init__(self, op: str, key: str, load) -> None:
        self.op, self.key, self._load = op, key, load
        self._by_device: dict = {}

    def get(self, index):
        fn = self._by_device.get(index)
        if fn is None:
            check_may_resolve(self.op, f"{self.key} (load on device {index})")
            fn = self._by_device[index] = self._load(index)
        return fn


def launch_on_stream(fn, grid, index, *args) -> None:
    """`fn[grid](*args)` on torch's current stream of device `index` (made the current device for the
    launch when it is not)."""
    import torch

    stream = torch._C._cuda_getCurrentRawStream(index)
    if index != torch.cuda.current_device():
        with torch.cuda.device(index):
            fn[grid](*args, stream=stream)
    else:
        fn[grid](*args, stream=stream)
