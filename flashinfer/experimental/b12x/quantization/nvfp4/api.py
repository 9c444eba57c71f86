"""quantization.nvfp4: plan, outputs, validation and run (the kernel is in `_kernel.py`).

    plan = b12x.quantization.nvfp4.plan(4096, 7168)            # capacity 4096 rows, K = 7168
    # pdl=True: a programmatic dependent of the kernel before it, releasing the one after (below)
    with b12x.PreparationSession("cuda") as session:
        session.prepare([plan])                                 # compiles and primes, once
    out = b12x.quantization.nvfp4.allocate_outputs(plan)
    b12x.quantization.nvfp4.run(plan=plan, x=x, global_scale=gs, outputs=out)   # any M <= 4096
    packed, scales = out.view(x.shape[0])                      # the live part

    packed, scales = b12x.quantization.nvfp4.quantize(x, gs)    # one call (default session)

Bits: equal to `_lib.quant.quantize_nvfp4` followed by `swizzle_scales(scales, 0)` (reference.py).
`run` launches on torch's current stream, never compiles, allocates nothing and never reads a
tensor on the host: it is CUDA-graph safe (a Python-float global scale is baked into a captured
graph; pass a device tensor to change it between replays).

PDL (`plan(..., pdl=True)`): every program runs griddepcontrol.wait before its first global access and
griddepcontrol.launch_dependents right after it; the launch carries the programmatic-serialization
attribute (a programmatic edge under CUDA graph capture). The quantizer then launches and becomes
resident while the kernel before it drains, and a PDL kernel after it (e.g. a GEMM planned with
`GemmQuery(pdl="wait")`, which then reads these codes only after this kernel completed) launches while
this one runs. Bits are the same; the wait makes it safe after any kernel, PDL or not.
"""

from __future__ import annotations

import math
import numbers
import struct
from dataclasses import dataclass

import torch

from ..._lib.arch import resolve_device
from ..._lib.checks import check_disjoint, describe
from ..._lib.quant import swizzled_size
from ..._lib.scratch import ScratchBufferSpec, dtype_name
from ..._lib.timing import seconds_per_run
from ...preparation.plan import Plan, PlanState
from ...preparation.session import ensure_prepared
from .._shared._host import as_launcher, check_kernel_aligned, check_tensor
from . import reference

OP = "quantization.nvfp4"
BLOCK = 16
DTYPES = ("bfloat16", "float16")
ALIGN = 16  # bytes; the compiled kernel assumes 16-byte aligned x, packed and scales
_MAX_ROWS = (1 << 31) - 128  # live M is an i32 kernel argument, padded to a multiple of 128
_ONESHOT_ROWS = 1 << 30  # capacity of quantize()'s plans: it allocates its outputs per call
_CUTE_VIEWS = {2: torch.float8_e4m3fn}  # a CuTe tile's scales (launcher arguments x, packed, scales, gs_ptr, ...)


@dataclass(frozen=True)
class NvFp4Caps:
    """Static facts of a plan: max_rows (capacity of M), k (row length, K % 16 == 0) and pdl (launched as a
    programmatic dependent: module docstring)."""

    max_rows: int
    k: int
    pdl: bool = False


class NvFp4Plan(Plan):
    """A quantizer plan: caps = NvFp4Caps, invocation = the activation dtype name, override = an
    `NvFp4Config` (Triton), a `CuteTile` (CuTe DSL, `_kernel_cute.py`) or an `NvFp4Dispatch` of them
    (`_dispatch`), or None.

    Its selection is one config, or (capacity >= `_dispatch.LARGE_FROM_M` rows) an `NvFp4Dispatch`:
    two or three tiles compiled and primed at prepare time, the live M picking one per run: the small tile,
    the preload mid tile up to 2^26 elements and the Triton large tile. With the CuTe switch on
    (`_dispatch.CUTE_ABOVE_SMALL`, off since session 46) and `_dispatch.CUTE_FROM_M` (3072) rows of capacity, the
    CuTe tile runs from 3072 live rows in place of the tile above the small one there (`_dispatch.default_selection`
    says where it does not)."""

    @property
    def dtype(self) -> str:
        return self.invocation

    def heuristic(self, arch):
        if arch is None:
            return None  # the reference backend has nothing to choose
        from ._dispatch import default_selection, with_pdl

        return with_pdl(default_selection(self.caps.max_rows, self.caps.k), self.caps.pdl)

    def candidates(self, arch) -> tuple:
        if arch is None:
            return (None,)
        from ._dispatch import candidate_selections, with_pdl

        return tuple(with_pdl(s, self.caps.pdl) for s in candidate_selections(self.caps.max_rows, self.caps.k))

    def kernels(self, config, arch: str) -> tuple:
        from ._dispatch import selection_configs, with_pdl
        from ._kernel import compile_nvfp4
        from ._kernel_cute import CuteTile, compile_cute

        configs = selection_configs(with_pdl(config, self.caps.pdl))  # an override's tiles too
        return tuple(
            (compile_cute if isinstance(c, CuteTile) else compile_nvfp4, (self.dtype, self.caps.k, c, arch))
            for c in configs
        )

    def scratch_specs(self, config=None, device="cuda") -> tuple[ScratchBufferSpec, ...]:
        # The fp32 the kernel's global-scale pointer reads when the scale comes as a Python float.
        return (ScratchBufferSpec("global_scale", (1,), "float32", device),)

    def prime(self, state: PlanState) -> None:
        rows, k = min(self.caps.max_rows, 128), self.caps.k
        gen = torch.Generator(device=state.device).manual_seed(0)
        x = torch.randn(rows, k, device=state.device, generator=gen).to(getattr(torch, self.dtype))
        packed = torch.empty(rows, k // 2, dtype=torch.uint8, device=state.device)
        scales = torch.empty(swizzled_size(rows, k // BLOCK), dtype=torch.uint8, device=state.device)
        state.scratch["global_scale"].fill_(1.0)
        for tile in range(max(1, len(state.kernels))):  # every tile a live M can pick: loaded before freeze
            _execute(state, x, None, 1.0, packed, scales, tile)
            _execute(state, x, state.scratch["global_scale"], 0.0, packed, scales, tile)
        if state.device.type == "cuda":
            torch.cuda.synchronize(state.device)  # a launch error surfaces here, at prepare time

    def measure(self, state: PlanState) -> float:
        rows, k = min(self.caps.max_rows, 16384), self.caps.k
        x = torch.randn(rows, k, device=state.device).to(getattr(torch, self.dtype))
        packed = torch.empty(rows, k // 2, dtype=torch.uint8, device=state.device)
        scales = torch.empty(swizzled_size(rows, k // BLOCK), dtype=torch.uint8, device=state.device)
        return seconds_per_run(lambda: _execute(state, x, state.scratch["global_scale"], 0.0, packed, scales))


@dataclass(frozen=True, eq=False)
class Outputs:
    """Output storage at a plan's capacity: packed uint8 [max_rows, K/2] and float8_e4m3fn scales
    [swizzled_size(max_rows, K/16)] (128x4 swizzled; rows padded to a multiple of 128)."""

    packed: torch.Tensor
    scales: torch.Tensor

    def view(self, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(packed [m, K/2], scales [swizzled_size(m, K/16)]): what a run over m rows wrote."""
        k = self.packed.shape[1] * 2
        return self.packed[:m], self.scales[: swizzled_size(m, k // BLOCK)]


def plan(m: int, k: int, *, invocation=None, override=None, pdl: bool = False) -> NvFp4Plan:
    """A pure, hashable plan for quantizing up to `m` rows of length `k`.

    m: capacity (max rows per run, >= 1); live M is a run-time argument and never compiles.
    k: row length, a multiple of 16 (one E4M3 scale per 16 elements); static (a compile key).
    invocation: the activation dtype, torch.bfloat16 (default, None) or torch.float16 (or its name).
    override: an `NvFp4Config` or a `CuteTile` (one tile for every M) or an `NvFp4Dispatch` (a small and a large tile,
        the live M from which the large one runs, optionally a mid tile and the M it runs below) to use
        instead of the heuristic/autotuned selection.
    pdl: launch as a programmatic dependent (module docstring), every tile of the selection.
    """
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= _MAX_ROWS:
        raise ValueError(f"m must be an int in [1, {_MAX_ROWS}] (the row capacity), got {m!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < BLOCK or k % BLOCK:
        raise ValueError(f"k must be a positive multiple of {BLOCK}, got {k!r}")
    dtype = dtype_name(invocation) if invocation is not None else "bfloat16"
    if dtype not in DTYPES:
        raise ValueError(f"invocation must be the activation dtype, one of {DTYPES}, got {invocation!r}")
    if override is not None:
        from ._dispatch import can_select

        if not can_select(k, override):
            raise ValueError(
                f"override must be an NvFp4Config, CuteTile or NvFp4Dispatch valid for k={k}, got {override!r}"
            )
    if not isinstance(pdl, bool):
        raise ValueError(f"pdl must be a bool, got {pdl!r}")
    return NvFp4Plan(op=OP, caps=NvFp4Caps(m, k, pdl), invocation=dtype, override=override)


def allocate_outputs(plan: NvFp4Plan, *, device="cuda") -> Outputs:
    """Output storage at the plan's capacity on `device` (contents undefined until a run)."""
    _check_plan(plan)
    m, k = plan.caps.max_rows, plan.caps.k
    packed = torch.empty(m, k // 2, dtype=torch.uint8, device=device)
    scales = torch.empty(swizzled_size(m, k // BLOCK), dtype=torch.float8_e4m3fn, device=device)
    return Outputs(packed, scales)


def run(*, plan: NvFp4Plan, x: torch.Tensor, global_scale, outputs: Outputs) -> None:
    """Quantize x [M, K] (M <= capacity) into `outputs` (rows [0, M) of packed; the first
    swizzled_size(M, K/16) scale bytes, zero padding of the last 128-row block included).

    global_scale: a 1-element fp32 tensor on the plan's device (read only by the kernel) or a
    Python float; finite and > 0 (a tensor's value is not checked: that would read it on the host).
    Under torch.compile the call is one custom op (`_ops.py`) whose checks run when it runs.
    """
    _check_plan(plan)
    if not isinstance(outputs, Outputs):
        raise ValueError(f"outputs must be the Outputs of allocate_outputs(plan), got {type(outputs).__name__}")
    if torch.compiler.is_compiling():
        _ops.call(x, global_scale, outputs.packed, outputs.scales, plan)
        return
    state = plan.state
    _check_x(plan, state, x)
    _check_outputs(plan, state, outputs.packed, outputs.scales, plan.caps.max_rows)
    check_disjoint(
        ("x", x),
        ("outputs.packed", outputs.packed),
        ("outputs.scales", outputs.scales),
        rule="x and the outputs must be disjoint",
    )
    gs_tensor, gs_value = _global_scale(global_scale, state.device)
    _execute(state, x, gs_tensor, gs_value, outputs.packed, outputs.scales)


def quantize(x: torch.Tensor, global_scale) -> tuple[torch.Tensor, torch.Tensor]:
    """One call: x [M, K] (bf16/fp16, K % 16 == 0) -> (packed uint8 [M, K/2], float8_e4m3fn scales
    [swizzled_size(M, K/16)]), allocated here.

    The first call per (K, dtype, device) prepares a plan in the device's default
    PreparationSession (compile + prime); after `freeze_kernel_resolution` a (K, dtype) not seen
    before raises KernelResolutionFrozenError, a new M never does. Under torch.compile the outputs are
    allocated traced and the launch is one custom op (`_ops.py`).
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a 2-D tensor [M, K], got {describe(x)}")
    dtype = dtype_name(x.dtype)
    if dtype not in DTYPES:
        raise ValueError(f"x must be bfloat16 or float16, got {dtype}")
    k = x.shape[1]
    if k < BLOCK or k % BLOCK:
        raise ValueError(f"x must have K % {BLOCK} == 0 (K >= {BLOCK}), got K={k}")
    m = x.shape[0]
    packed = torch.empty(m, k // 2, dtype=torch.uint8, device=x.device)
    scales = torch.empty(swizzled_size(m, k // BLOCK), dtype=torch.float8_e4m3fn, device=x.device)
    if torch.compiler.is_compiling():
        _ops.call(x, global_scale, packed, scales, None)
    else:
        quantize_into(x, global_scale, packed, scales)
    return packed, scales


def quantize_into(x: torch.Tensor, global_scale, packed: torch.Tensor, scales: torch.Tensor) -> None:
    """`quantize`'s launch into given outputs (the one-shot plan for x's K, dtype and device)."""
    p = _oneshot_plan(x.shape[1], dtype_name(x.dtype), resolve_device(x.device))
    state = p.state
    _check_x(p, state, x)
    gs_tensor, gs_value = _global_scale(global_scale, state.device)
    _execute(state, x, gs_tensor, gs_value, packed, scales)


_oneshot: dict = {}


def _oneshot_plan(k: int, dtype: str, device: torch.device) -> NvFp4Plan:
    """The plan quantize() uses for (k, dtype, device), prepared on first use."""
    p = _oneshot.get((k, dtype, device))
    if p is None:
        p = _oneshot[(k, dtype, device)] = plan(_ONESHOT_ROWS, k, invocation=dtype)
    return ensure_prepared(p, device)


# -------------------------------------------------------------------------------------------------
# Execution
# -------------------------------------------------------------------------------------------------
def _execute(state: PlanState, x, gs_tensor, gs_value: float, packed, scales, tile: int | None = None) -> None:
    """One launch; `tile` (prime) forces a tile of the selection, else the live M picks it."""
    if state.arch is None:  # CPU: the reference backend
        reference.quantize_into(x, gs_tensor if gs_tensor is not None else gs_value, packed, scales)
        return
    gs_ptr = gs_tensor if gs_tensor is not None else state.scratch["global_scale"]
    m = x.shape[0]
    fns, pick = _launchers(state)
    if tile is None:
        tile = pick(m) if pick is not None else 0
    fns[tile](x, packed, scales, gs_ptr, gs_value, int(gs_tensor is not None), m)


def _launchers(state: PlanState) -> tuple:
    """(launchers in `selection_configs` order, the selection's `tile(m)` picker or None for one tile),
    looked up once per prepared selection (memory-cache hits): keyed on the identity of
    `state.kernels`, which a re-prepare replaces."""
    cached = state.extra.get("launchers")
    if cached is not None and cached[0] is state.kernels:
        return cached[1]
    fns = tuple(as_launcher(compile_fn, args, _CUTE_VIEWS) for compile_fn, args in state.kernels)
    pick = getattr(state.selection, "tile", None) if len(fns) > 1 else None  # NvFp4Dispatch.tile
    state.extra["launchers"] = (state.kernels, (fns, pick))
    return fns, pick


# -------------------------------------------------------------------------------------------------
# Validation (every error names the argument, what was expected and what came)
# -------------------------------------------------------------------------------------------------
def _check_plan(plan) -> None:
    if not isinstance(plan, NvFp4Plan):
        raise ValueError(f"plan must come from b12x.quantization.nvfp4.plan(m, k), got {type(plan).__name__}")


def _check_x(plan: NvFp4Plan, state: PlanState, x) -> int:
    k, cap = plan.caps.k, plan.caps.max_rows
    if (
        not isinstance(x, torch.Tensor)
        or x.dim() != 2
        or x.shape[1] != k
        or dtype_name(x.dtype) != plan.dtype
        or x.device != state.device
        or not x.is_contiguous()
    ):
        raise ValueError(f"x must be {plan.dtype} [M, {k}] contiguous on {state.device}, got {describe(x)}")
    if x.shape[0] > cap:
        raise ValueError(f"x has {x.shape[0]} rows, above the plan's capacity m={cap}")
    check_kernel_aligned("x", x, state, ALIGN)
    return x.shape[0]


def _check_outputs(plan: NvFp4Plan, state: PlanState, packed, scales, rows: int) -> None:
    k = plan.caps.k
    want = {
        "outputs.packed": (packed, (torch.uint8,), (rows, k // 2)),
        "outputs.scales": (scales, (torch.uint8, torch.float8_e4m3fn), (swizzled_size(rows, k // BLOCK),)),
    }
    for name, (t, dtypes, shape) in want.items():
        check_tensor(name, t, dtypes, shape, state, ALIGN)


def _global_scale(global_scale, device: torch.device) -> tuple[torch.Tensor | None, float]:
    """(device tensor or None, value when a number): validated without reading a tensor."""
    if isinstance(global_scale, torch.Tensor):
        if global_scale.dtype != torch.float32 or global_scale.numel() != 1 or global_scale.device != device:
            raise ValueError(
                f"global_scale must be a float32 tensor of 1 element on {device} (or a float), "
                f"got {describe(global_scale)}"
            )
        return global_scale, 0.0
    if isinstance(global_scale, bool) or not isinstance(global_scale, numbers.Real):
        raise ValueError(
            f"global_scale must be a float or a 1-element float32 tensor, got {type(global_scale).__name__}"
        )
    value = float(global_scale)
    try:
        value = struct.unpack("<f", struct.pack("<f", value))[0]  # what the kernel's fp32 holds
    except OverflowError:
        value = math.inf
    if not 0 < value < math.inf:
        raise ValueError(f"global_scale must be finite and > 0 as fp32, got {global_scale!r}")
    return None, value


from . import _ops  # noqa: E402 - registers torch.ops.b12x.quantization_nvfp4_quantize_
