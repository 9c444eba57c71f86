"""quantization.mxfp8: plan, validation and quantize_rows (the kernel is in `_kernel.py`).

    q = b12x.quantization.mxfp8.MxFp8Query(k=7168, dtype="bfloat16", max_rows=4096)
    plan = b12x.quantization.mxfp8.plan(q)        # or plan((7168, torch.bfloat16, 4096))
    with b12x.PreparationSession("cuda") as session:
        session.prepare([plan])
    b12x.quantization.mxfp8.quantize_rows(x, values, scale_rows, scale_mma, plan=plan)

    b12x.quantization.mxfp8.quantize_rows(x, values, scale_rows, scale_mma)   # one call, default session

Bits: equal to `_lib.quant.quantize_mxfp8` (values, row-major scales) and `swizzle_scales` of the
scales at every live position (reference.py); swizzled padding bytes are the caller's (MX
consumers expect 127 there). With a prepared plan the call never compiles, allocates nothing and
reads nothing on the host: it is CUDA-graph safe.

PDL (`MxFp8Query(..., pdl=True)`): every program runs griddepcontrol.wait before its first global
access and griddepcontrol.launch_dependents right after it; the launch carries the programmatic-
serialization attribute (a programmatic edge under CUDA graph capture). The quantizer then launches
while the kernel before it drains, and a PDL kernel after it (e.g. the MXFP8 GEMM planned with
`GemmQuery(pdl="wait")` or "prefetch") launches while this one runs. Same bits; the wait makes it
safe after any kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..._lib.arch import resolve_device
from ..._lib.checks import check_disjoint, describe
from ..._lib.quant import swizzled_size
from ..._lib.scratch import dtype_name
from ..._lib.timing import seconds_per_run
from ...preparation.plan import Plan, PlanState
from ...preparation.session import ensure_prepared
from .._shared._host import check_kernel_aligned, check_tensor, launcher
from . import reference

OP = "quantization.mxfp8"
BLOCK = 32
DTYPES = ("bfloat16", "float16")
ALIGN = 16  # bytes; the compiled kernel assumes 16-byte aligned tensors
_ONESHOT_ROWS = 1 << 30  # capacity of the plans quantize_rows(plan=None) prepares
_E8M0 = getattr(torch, "float8_e8m0fnu", None)
_SCALE_DTYPES = (torch.uint8,) if _E8M0 is None else (torch.uint8, _E8M0)
_CUTE_VIEWS = {1: torch.uint8, 2: torch.uint8, 3: torch.uint8}  # the CuTe kernel's values and scales: uint8 storage


@dataclass(frozen=True)
class MxFp8Query:
    """The static facts of an MXFP8 quantizer: k (row length, K % 32 == 0), dtype (the source
    dtype, "bfloat16" or "float16"; a torch dtype is accepted and stored by name) and max_rows (the
    capacity of M; default 2^30, no practical cap). A plain tuple (k, dtype, max_rows) means the same.
    pdl: launched as a programmatic dependent (module docstring)."""

    k: int
    dtype: str = "bfloat16"
    max_rows: int = _ONESHOT_ROWS
    pdl: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < BLOCK or self.k % BLOCK:
            raise ValueError(f"query.k must be a positive multiple of {BLOCK}, got {self.k!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"query.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if isinstance(self.max_rows, bool) or not isinstance(self.max_rows, int) or not 1 <= self.max_rows < 1 << 31:
            raise ValueError(f"query.max_rows must be an int in [1, 2^31), got {self.max_rows!r}")
        if not isinstance(self.pdl, bool):
            raise ValueError(f"query.pdl must be a bool, got {self.pdl!r}")


class MxFp8Plan(Plan):
    """caps = MxFp8Query; override = an `MxFp8Config` (Triton, `_kernel`), a `CuteMxTile` (CuTe DSL,
    `_kernel_cute`) or None."""

    def heuristic(self, arch):
        if arch is None:
            return None
        from ._kernel import default_config

        return replace(default_config(self.caps.k, arch), pdl=self.caps.pdl)

    def candidates(self, arch) -> tuple:
        if arch is None:
            return (None,)
        from ._kernel import candidate_configs

        return tuple(replace(c, pdl=self.caps.pdl) for c in candidate_configs(self.caps.k, arch=arch))

    def kernels(self, config, arch: str) -> tuple:
        from ._kernel import compile_mxfp8
        from ._kernel_cute import CuteMxTile, compile_cute

        config = replace(config, pdl=self.caps.pdl)  # an override's too
        compile_fn = compile_cute if isinstance(config, CuteMxTile) else compile_mxfp8
        return ((compile_fn, (self.caps.dtype, self.caps.k, config, arch)),)

    def _synthetic(self, state: PlanState, rows: int):
        k = self.caps.k
        gen = torch.Generator(device=state.device).manual_seed(0)
        x = torch.randn(rows, k, device=state.device, generator=gen).to(getattr(torch, self.caps.dtype))
        values = torch.empty(rows, k, dtype=torch.uint8, device=state.device)
        scale_rows = torch.empty(rows, k // BLOCK, dtype=torch.uint8, device=state.device)
        scale_mma = torch.empty(swizzled_size(rows, k // BLOCK), dtype=torch.uint8, device=state.device)
        return x, values, scale_rows, scale_mma

    def prime(self, state: PlanState) -> None:
        _execute(state, *self._synthetic(state, min(self.caps.max_rows, 128)))
        if state.device.type == "cuda":
            torch.cuda.synchronize(state.device)  # a launch error surfaces here, at prepare time

    def measure(self, state: PlanState) -> float:
        args = self._synthetic(state, min(self.caps.max_rows, 16384))
        return seconds_per_run(lambda: _execute(state, *args))


def plan(query, *, invocation=None, override=None) -> MxFp8Plan:
    """A pure, hashable plan. query: an `MxFp8Query` or a tuple (k, dtype, max_rows).

    k is static (a compile key, K % 32 == 0); live M <= max_rows is a run-time argument and never
    compiles. invocation: reserved (None: nothing is chosen per call). override: an `MxFp8Config` or a
    `CuteMxTile`.
    """
    if isinstance(query, tuple):
        if len(query) != 3:
            raise ValueError(f"query must be MxFp8Query or a tuple (k, dtype, max_rows), got {query!r}")
        query = MxFp8Query(*query)
    if not isinstance(query, MxFp8Query):
        raise ValueError(f"query must be MxFp8Query or a tuple (k, dtype, max_rows), got {type(query).__name__}")
    if invocation is not None:
        raise ValueError(f"invocation must be None for {OP} (nothing is chosen per call), got {invocation!r}")
    if override is not None:
        from ._kernel import MxFp8Config, can_implement
        from ._kernel_cute import CuteMxTile, why_not

        ok = isinstance(override, MxFp8Config) and can_implement(query.k, override)
        if not ok and not (isinstance(override, CuteMxTile) and why_not(query.k, override) is None):
            raise ValueError(f"override must be an MxFp8Config or CuteMxTile valid for k={query.k}, got {override!r}")
    return MxFp8Plan(op=OP, caps=query, invocation=None, override=override)


def quantize_rows(source, values, scale_rows, scale_mma, *, plan: MxFp8Plan | None = None) -> None:
    """Quantize source [M, K] (bf16/fp16) into the caller's tensors.

    values: float8_e4m3fn (or uint8) [M, K]; scale_rows: uint8 (or float8_e8m0fnu) [M, K/32],
    row-major; scale_mma: uint8 (or float8_e8m0fnu) 1-D swizzled storage (128x4 atoms) for at least
    M rows: numel a multiple of 128 * ceil4(K/32) and >= swizzled_size(M, K/32). Only live scale
    positions are written. All on the source's device, contiguous, pairwise disjoint.

    plan=None prepares (once per K, dtype and device) a plan in the default PreparationSession; a
    given plan must be prepared (PreparationSession) and match the source. Under torch.compile the call is one
    custom op (`_ops.py`) whose checks run when it runs.
    """
    if plan is not None and not isinstance(plan, MxFp8Plan):
        raise ValueError(f"plan must come from b12x.quantization.mxfp8.plan(query), got {type(plan).__name__}")
    if torch.compiler.is_compiling():
        _ops.call(source, values, scale_rows, scale_mma, plan)
        return
    if plan is None:
        if not isinstance(source, torch.Tensor) or source.dim() != 2:
            raise ValueError(f"source must be a 2-D tensor [M, K], got {describe(source)}")
        dtype, k = dtype_name(source.dtype), source.shape[1]
        if dtype not in DTYPES:
            raise ValueError(f"source must be bfloat16 or float16, got {dtype}")
        if k < BLOCK or k % BLOCK:
            raise ValueError(f"source must have K % {BLOCK} == 0 (K >= {BLOCK}), got K={k}")
        plan = _oneshot_plan(k, dtype, resolve_device(source.device))
    state = plan.state
    m = _check_source(plan, state, source)
    k = plan.caps.k
    nb = k // BLOCK
    check_tensor("values", values, (torch.uint8, torch.float8_e4m3fn), (m, k), state, ALIGN)
    check_tensor("scale_rows", scale_rows, _SCALE_DTYPES, (m, nb), state, ALIGN)
    _check_scale_mma(scale_mma, m, nb, state)
    check_disjoint(
        ("source", source),
        ("values", values),
        ("scale_rows", scale_rows),
        ("scale_mma", scale_mma),
        rule="source and the outputs must be disjoint",
    )
    _execute(state, source, values, scale_rows, scale_mma)


_oneshot: dict = {}


def _oneshot_plan(k: int, dtype: str, device: torch.device) -> MxFp8Plan:
    """The plan quantize_rows(plan=None) uses for (k, dtype, device), prepared on first use."""
    p = _oneshot.get((k, dtype, device))
    if p is None:
        p = _oneshot[(k, dtype, device)] = plan(MxFp8Query(k, dtype))
    return ensure_prepared(p, device)


# -------------------------------------------------------------------------------------------------
# Execution
# -------------------------------------------------------------------------------------------------
def _execute(state: PlanState, source, values, scale_rows, scale_mma) -> None:
    if state.arch is None:  # CPU: the reference backend
        reference.quantize_rows_into(source, values, scale_rows, scale_mma)
        return
    launcher(state, _CUTE_VIEWS)(source, values, scale_rows, scale_mma, source.shape[0])


# -------------------------------------------------------------------------------------------------
# Validation (every error names the argument, what was expected and what came)
# -------------------------------------------------------------------------------------------------
def _check_source(plan: MxFp8Plan, state: PlanState, source) -> int:
    q = plan.caps
    if (
        not isinstance(source, torch.Tensor)
        or source.dim() != 2
        or source.shape[1] != q.k
        or dtype_name(source.dtype) != q.dtype
        or source.device != state.device
        or not source.is_contiguous()
    ):
        raise ValueError(f"source must be {q.dtype} [M, {q.k}] contiguous on {state.device}, got {describe(source)}")
    if source.shape[0] > q.max_rows:
        raise ValueError(f"source has {source.shape[0]} rows, above the plan's capacity max_rows={q.max_rows}")
    check_kernel_aligned("source", source, state, ALIGN)
    return source.shape[0]


def _check_scale_mma(t, m: int, nb: int, state: PlanState) -> None:
    block_rows = 128 * ((nb + 3) // 4 * 4)  # bytes of one 128-row block of the swizzled layout
    need = swizzled_size(m, nb)
    if (
        not isinstance(t, torch.Tensor)
        or t.dtype not in _SCALE_DTYPES
        or t.dim() != 1
        or t.numel() < need
        or t.numel() % block_rows
        or t.device != state.device
        or not t.is_contiguous()
    ):
        names = " or ".join(dtype_name(d) for d in _SCALE_DTYPES)
        raise ValueError(
            f"scale_mma must be {names} 1-D contiguous on {state.device} with numel a multiple of {block_rows} "
            f"and >= {need} (swizzled 128x4 storage for {m} rows of {nb} scales), got {describe(t)}"
        )
    check_kernel_aligned("scale_mma", t, state, ALIGN)


from . import _ops  # noqa: E402 - registers torch.ops.b12x.quantization_mxfp8_quantize_rows_
