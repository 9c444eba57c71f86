"""moe.fused_moe requantize and combine kernels (Triton), the steps around FC2.

requantize (nvfp4 / w4a8 recipes): FC1's bf16 output C [R_cap, I] (sorted rows) -> the FC2 operand,
NVFP4 (global scale a2_gscale[sorted_expert[p]]) or MXFP8, bit-exact to the `_lib.quant` oracles on
C's values (the same tile encoders as the gather, `_routing.store_operand`), or "nvfp4_deq" (the
NVFP4 quantization stored as bf16 e2m1 x e4m3 into a2_deq, for the grouped kernels' bf16-A path). Rows p >=
expert_start[E] are skipped: the count is read on the device, the grid covers the live T * k rows.

combine: out[t] = round_to_bf16( sum_{j = 0..k-1, route valid} w[t, j] * C2[route_row[t, j]] )
(w left out when the router weight was applied on the input), summed in fp32 in j order from +0,
each product rounded before its add (fp fusion off): the reference's `out[t] += w * y`, bit for bit.

Bytes: requantize reads R * I * 2 and writes R * I / 2 (+ scales) or R * I; combine reads
R * H * 4 (C2 rows) + T * k * 8 and writes T * H * 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from ..._lib import triton_pdl as _triton_pdl
from ..._lib import triton_quant as _triton_helpers
from ..._lib.compile import kernel
from ..._lib.triton_pdl import gdc_enter
from ...quantization.nvfp4 import _encodes as _nvfp4_encodes
from . import _routing
from ._routing import (
    OP,
    OPERAND_FORMATS,
    SF_BLOCK,
    TritonKernel,
    fmt_ptr,
    largest_pow2_divisor,
    operand_buffers,
    store_operand,
)


@dataclass(frozen=True)
class CombineConfig:
    """requant: block_m rows x block_k columns per program (block_k divides I); combine: block_t
    tokens x block_h columns."""

    block_m: int = 16
    block_k: int = 256
    block_t: int = 1
    block_h: int = 128
    num_warps: int = 4
    nvfp4_deq_encode: str = "divide"  # as `RoutingConfig.nvfp4_deq_encode`, for the requantize
    pdl: bool = False  # as `RoutingConfig.pdl`: requantize and combine launched as programmatic dependents


def default_config(intermediate: int) -> CombineConfig:
    # Combine tile 1 x 128 (H200, E = 128 w4a16, session 21's `bench_moe --combine-tile`): the combine
    # step (layer minus FC2) took 2.7 / 3.3 / 4.4 us at T = 1 / 4 / 64 with the old 4 x 512 and
    # 1.1 / 0.9 / 1.9 with 1 x 128 (4 x 128: 1.4 / 1.3 / 1.3; 2 x 256: 1.4 / 1.2 / 2.6): at decode T the
    # old tile ran 1-16 programs for the layer's last dependent step.
    # nvfp4_deq_encode "search": as the routing's heuristic (`_routing.RoutingConfig.nvfp4_deq_encode`).
    return CombineConfig(block_k=largest_pow2_divisor(intermediate, 256), nvfp4_deq_encode="search")


def can_implement(intermediate: int, a2_fmt: str | None, config: CombineConfig) -> bool:
    pow2 = lambda n: n > 0 and n & (n - 1) == 0
    ok = all(pow2(v) for v in (config.block_m, config.block_k, config.block_t, config.block_h))
    if a2_fmt is not None:
        ok = ok and a2_fmt in ("nvfp4", "mxfp8", "nvfp4_deq") and config.block_k >= SF_BLOCK[a2_fmt]
        ok = ok and intermediate % config.block_k == 0
    ok = ok and config.num_warps in (1, 2, 4, 8, 16) and config.nvfp4_deq_encode in _routing.NVFP4_DEQ_ENCODES
    return ok and isinstance(config.pdl, bool)


@triton.jit(do_not_specialize=["R"])
def _requant_kernel(
    c_ptr,  # bf16 [R_cap, I]: FC1 output rows in sorted order
    sorted_expert_ptr,  # int32 [R_cap]
    start_ptr,  # int32 [E + 1]; start[E] = live rows
    g2_ptr,  # fp32 [E] a2_gscale (nvfp4) or any fp32 pointer
    out_ptr,  # the FC2 operand's values (uint8; bf16 for nvfp4_deq)
    sf_ptr,  # its swizzled scales (uint8)
    R,  # T * k: rows the grid covers
    IDIM: tl.constexpr,
    E: tl.constexpr,
    FMT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DEQ_SEARCH: tl.constexpr,
    PDL: tl.constexpr,  # 1: launched as a programmatic dependent (gdc_enter)
):
    gdc_enter(PDL)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    ok = rows < tl.load(start_ptr + E)
    rows64 = rows.to(tl.int64)
    col0 = tl.program_id(1) * BLOCK_K
    cols = col0 + tl.arange(0, BLOCK_K)
    x = tl.load(c_ptr + rows64[:, None] * IDIM + cols[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
    if (FMT == 1) or (FMT == 3):
        e = tl.load(sorted_expert_ptr + rows, mask=ok, other=0)
        gs = tl.load(g2_ptr + e, mask=ok, other=1.0)
    else:
        gs = tl.full([BLOCK_M], 1.0, tl.float32)
    store_operand(x, gs, out_ptr, sf_ptr, rows64, ok, col0, IDIM, FMT, BLOCK_M, BLOCK_K, DEQ_SEARCH)


@triton.jit(do_not_specialize=["T", "w_st", "w_sj"])
def _combine_kernel(
    c2_ptr,  # fp32 [R_cap, H]: FC2 output rows in sorted order
    route_row_ptr,  # int32 [max_tokens * k]: sorted row of route (t, j), -1 when ignored
    w_ptr,  # topk_weights fp32 [T, k], strides (w_st, w_sj)
    out_ptr,  # bf16 [T, H] contiguous
    T,
    w_st,
    w_sj,
    K: tl.constexpr,
    H: tl.constexpr,
    ON_INPUT: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    PDL: tl.constexpr,  # 1: launched as a programmatic dependent (gdc_enter)
):
    gdc_enter(PDL)
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = t < T
    t64 = t.to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    c_ok = cols < H
    acc = tl.zeros([BLOCK_T, BLOCK_H], dtype=tl.float32)
    for j in tl.static_range(K):
        p = tl.load(route_row_ptr + t * K + j, mask=t_ok, other=-1)
        live = p >= 0
        y = tl.load(c2_ptr + p.to(tl.int64)[:, None] * H + cols[None, :], mask=live[:, None] & c_ok[None, :], other=0.0)
        if not ON_INPUT:
            w = tl.load(w_ptr + t64 * w_st + j * w_sj, mask=live, other=0.0)
            y = y * w[:, None]
        acc = acc + y  # +0 for an ignored route leaves acc unchanged
    tl.store(out_ptr + t64[:, None] * H + cols[None, :], acc.to(tl.bfloat16), mask=t_ok[:, None] & c_ok[None, :])


class CombineKernels:
    """requantize (None for w4a16) and combine for one static key."""

    def __init__(self, num_topk, num_experts, hidden, intermediate, a2_fmt, on_input, config: CombineConfig, arch):
        self.k, self.h, self.i, self.config = num_topk, hidden, intermediate, config
        key = f"combine k={num_topk} E={num_experts} H={hidden} I={intermediate} {a2_fmt} on_input={on_input}"
        self.requant = None
        self.a2_fmt = a2_fmt
        if a2_fmt is not None:
            self.requant = TritonKernel(
                _requant_kernel,
                dict(
                    c_ptr="*bf16",
                    sorted_expert_ptr="*i32",
                    start_ptr="*i32",
                    g2_ptr="*fp32",
                    out_ptr=fmt_ptr(a2_fmt),
                    sf_ptr="*u8",
                    R="i32",
                ),
                dict(
                    IDIM=intermediate,
                    E=num_experts,
                    FMT=OPERAND_FORMATS[a2_fmt],
                    BLOCK_M=config.block_m,
                    BLOCK_K=config.block_k,
                    DEQ_SEARCH=a2_fmt == "nvfp4_deq" and config.nvfp4_deq_encode == "search",
                ),
                config.num_warps,
                arch,
                key + " requant",
                aligned=("c_ptr", "sorted_expert_ptr", "start_ptr", "out_ptr", "sf_ptr"),
                pdl=config.pdl,
            )
        self.combine = TritonKernel(
            _combine_kernel,
            dict(c2_ptr="*fp32", route_row_ptr="*i32", w_ptr="*fp32", out_ptr="*bf16", T="i32", w_st="i32", w_sj="i32"),
            dict(K=num_topk, H=hidden, ON_INPUT=bool(on_input), BLOCK_T=config.block_t, BLOCK_H=config.block_h),
            config.num_warps,
            arch,
            key + " combine",
            aligned=("c2_ptr", "route_row_ptr", "out_ptr"),
            pdl=config.pdl,
        )

    def load(self, index: int) -> None:
        """Load the kernels' modules on device `index` (preparation: before any capture)."""
        for k in (self.requant, self.combine):
            if k is not None and k.arch is not None:
                k._loaded(index)

    def requantize(self, T, s, g2) -> None:
        """C1 -> the FC2 operand (a2, a2_scales; a2_deq for nvfp4_deq) for the live T * k rows
        (workspace views `s`)."""
        cfg, R = self.config, T * self.k
        if R:
            grid = (triton.cdiv(R, cfg.block_m), self.i // cfg.block_k, 1)
            values, scales = (s[name] for name in operand_buffers(2, self.a2_fmt))
            self.requant.launch(grid, s["c1"], s["sorted_expert"], s["expert_start"], g2, values, scales, R)

    def __call__(self, T, s, w, out) -> None:
        """out [T, H] = the weighted sum of each token's C2 rows."""
        cfg = self.config
        if T:
            grid = (triton.cdiv(T, cfg.block_t), triton.cdiv(self.h, cfg.block_h), 1)
            self.combine.launch(grid, s["c2"], s["route_row"], w, out, T, w.stride(0), w.stride(1))


@kernel(
    OP,
    backend="triton",
    sources=(_triton_helpers.__name__, _triton_pdl.__name__, _routing.__name__, _nvfp4_encodes.__name__),
)
def compile_combine(
    num_topk: int,
    num_experts: int,
    hidden: int,
    intermediate: int,
    a2_fmt: str | None,
    on_input: bool,
    config: CombineConfig,
    arch: str,
) -> CombineKernels:
    """requantize (a2_fmt "nvfp4" | "mxfp8" | "nvfp4_deq", None for w4a16) + combine, compiled for `arch`."""
    return _checked(num_topk, num_experts, hidden, intermediate, a2_fmt, on_input, config, arch)


def interpreted_combine(num_topk, num_experts, hidden, intermediate, a2_fmt, on_input, config=None) -> CombineKernels:
    """The same kernels through Triton's interpreter (TRITON_INTERPRET=1, CPU tensors)."""
    config = config or default_config(intermediate)
    return _checked(num_topk, num_experts, hidden, intermediate, a2_fmt, on_input, config, None)


def _checked(num_topk, num_experts, hidden, intermediate, a2_fmt, on_input, config, arch) -> CombineKernels:
    if not can_implement(intermediate, a2_fmt, config):
        raise ValueError(f"{OP}: combine cannot implement I={intermediate} with {a2_fmt} and {config}")
    return CombineKernels(num_topk, num_experts, hidden, intermediate, a2_fmt, on_input, config, arch)
