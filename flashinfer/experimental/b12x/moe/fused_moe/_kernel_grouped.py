"""moe.fused_moe expert GEMMs for large T: gemm's tiled kernel (`_kernel_tiled.TiledLogic`) over row
windows of the expert-sorted rows.

The decode expert kernels (`_kernel_experts.py`) issue 8 or 16 tokens per MMA group and re-read an
expert's weights once per group from L2; at T = 4096 (E = 128, k = 8: ~256 rows an expert) that is
decode-kernel speed on a prefill-sized problem. Here each CTA owns a bm-row WINDOW of the sorted rows
(grid y = ceil(R_cap / bm), x = the N tiles, N fastest so the CTAs resident together share A rows and
walk one expert's weight tiles) and runs one tiled GEMM tile per expert that has rows in its window:

    window [w0, w1) = [y * bm, y * bm + bm) clipped to the routed rows [0, start[E])
    experts e_first = sorted_expert[w0] .. e_last = sorted_expert[w1 - 1]
    per e: rows [max(start[e], w0), min(start[e + 1], w1)), skipped when empty

so no work list is needed (routing's `sorted_expert` and `expert_start` say it all) and live T is read
on the device only (graph replay at any T <= max_tokens). The tile-loops done are R / bm + (experts
that start inside a window), against sum_e ceil(rows_e / bm) for per-expert tiles: 1.5x the useful
rows at E = 128 with bm = 128 and 256 rows an expert (docs/predictions/moe.md).

FC1 (gated activations): a CTA's B tile of bn rows holds bn / 2 gate rows and the bn / 2 up rows they
pair with, interleaved by 8 (`b_row`: tile rows 16p .. 16p + 7 are gate rows j0 + 8p .., rows
16p + 8 .. 16p + 15 the up rows I + j0 + 8p ..), so a warp's accumulator n-tiles 2q and 2q + 1 hold
gate and up of the same 8 output columns and the epilogue applies the activation in registers:
C1[row, j] = act(gate * s, up * s) in bf16, s = w_alpha[e] * a_alpha[e] * 2^(C_a + C_b) — the decode
FC1's math (`_kernel_experts.Activation`). Non-gated FC1 (relu2) and FC2 use gemm's epilogue with the
per-expert scale; FC2 stores fp32 rows (summed per token by the combine).

Launch contract: the decode expert kernels' (`_kernel_experts.compile_fc1` / `compile_fc2`) with the
last tensor `sorted_expert` int32 [R_cap] (routing step 1) in place of `active`, so a binding swaps
kernels without another argument list. Pairs: gemm's tiled pairs (bf16/fp16 x FP4, NVFP4 x NVFP4);
K (H for FC1, I for FC2) a multiple of 128 (`why_not`).
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int64
from cutlass.cute.runtime import make_fake_stream

from ..._lib.compile import cute_compile, kernel
from ...gemm._shared.formats import pair_ok
from ...gemm.blockscaled import _kernel_tiled as KT
from ...gemm.blockscaled._kernel_tiled import TiledConfig
from . import _kernel_experts as X

GATED = X.GATED
K_ALIGN = 128  # the tiled kernel's K-tile and scale-block granularity
_SOURCES = X._SOURCES + (
    "flashinfer.experimental.b12x.gemm.blockscaled._kernel_tiled",
    "flashinfer.experimental.b12x.moe.fused_moe._kernel_experts",
)


def default_config(fc: int) -> TiledConfig:
    """128 x 128 tiles, 8 warps (gemm's M > 256 tile without the grouped raster: the window grid
    already walks N fastest inside a window)."""
    return TiledConfig(128, 128, 2, 4)


def why_not(fc: int, a_fmt: str, b_fmt: str, activation: str | None, config, k: int | None = None) -> str | None:
    """None when the grouped kernel implements this GEMM, else the reason. k: its K when known."""
    if fc not in (1, 2):
        return f"fc must be 1 or 2, got {fc!r}"
    if not isinstance(config, TiledConfig):
        return f"config must be a gemm TiledConfig, got {type(config).__name__}"
    if config.group_m or config.fp8_mma:
        return f"{config}: group_m and fp8_mma are not used by the grouped kernel (the window grid is its raster)"
    if not pair_ok(a_fmt, b_fmt) or (a_fmt, b_fmt) not in X.PAIRS:
        return f"A format {a_fmt} x weight format {b_fmt} has no tiled expert kernel"
    if fc == 1 and activation not in X.ACTIVATIONS:
        return f"activation must be one of {X.ACTIVATIONS}, got {activation!r}"
    if k is not None and (k <= 0 or k % K_ALIGN):
        return f"K = {k} must be a positive multiple of {K_ALIGN}"
    return KT.why_not(a_fmt, b_fmt, "bfloat16" if fc == 1 else "float32", config)


class GroupedLogic(X.Activation, KT.TiledLogic):
    """TiledLogic of one expert GEMM: per-expert scale, and for a gated FC1 the gate/up pairing."""

    def __init__(self, fc: int, a_fmt: str, b_fmt: str, activation: str | None, config: TiledConfig) -> None:
        reason = why_not(fc, a_fmt, b_fmt, activation, config)
        if reason is not None:
            raise ValueError(f"moe.fused_moe grouped expert kernel: {reason}")
        super().__init__(a_fmt, b_fmt, "bfloat16" if fc == 1 else "float32", config)
        self.fc = fc
        self.activation = activation if fc == 1 else None
        self.gated = self.activation in GATED

    # Runtime of one (window, expert): m = the last row + 1 (rows from the tile's m0), n = output
    # columns (I for FC1, H for FC2), s0 / s1 = &w_alpha[e], &a_alpha[e], s2 = act_params.
    def grid_n(self, b_rows):
        """CTA columns: B rows per tile (a gated tile holds bn / 2 outputs' gate and up rows)."""
        return (b_rows + self.cfg.bn - 1) // self.cfg.bn

    def b_row(self, ops, rt, n0, local):
        if not self.gated:
            return KT.TiledLogic.b_row(self, ops, rt, n0, local)
        j = (n0 >> 1) + ((local >> 4) << 3) + (local & 7)
        return j + ((local >> 3) & 1) * rt.n, j < rt.n

    def epilogue_scale(self, ops, rt):
        true = ops.boolean(True)
        scale = ops.ldg_f32(rt.s0_base, true) * ops.ldg_f32(rt.s1_base, true)
        return scale * ops.f32(float(2.0**self.exp))

    def epilogue(self, ops, rt, tid, m0, n0, acc):
        scale = self.epilogue_scale(ops, rt)
        if self.activation is None:  # FC2: gemm's store
            return self.store_acc(ops, rt, tid, m0, n0, acc, scale)
        out = list(acc)
        n_mt, n_nt = self.wtm // 16, self.wtn // 8
        if not self.gated:  # relu2
            for idx in range(len(acc)):
                out[idx] = self.act(ops, rt, acc[idx] * scale, ops.f32(0.0))
            return self.store_acc(ops, rt, tid, m0, n0, out, ops.f32(1.0))
        for mt in range(n_mt):
            for q in range(n_nt // 2):
                gate, up = (mt * n_nt + 2 * q) * 4, (mt * n_nt + 2 * q + 1) * 4
                for e in range(4):
                    out[gate + e] = self.act(ops, rt, acc[gate + e] * scale, acc[up + e] * scale)
        return self.store_acc(ops, rt, tid, m0, n0 >> 1, out, ops.f32(1.0), 2)


class GroupedGemm:
    def __init__(self, logic: GroupedLogic) -> None:
        self.logic = logic
        self.inner = KT.TiledGemm(logic, X.DEVICE)

    @cute.jit
    def _launch(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted, stream):
        grid_m = (mC.shape[0] + self.logic.cfg.bm - 1) // self.logic.cfg.bm
        grid_n = self.logic.grid_n(mB.shape[1])
        self.kernel(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted).launch(
            grid=[grid_n, grid_m, 1], block=[self.logic.threads, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted):
        tid, _, _ = cute.arch.thread_idx()
        bx, by, _ = cute.arch.block_idx()
        num_e = mB.shape[0]
        k = mB.shape[2] * 2  # FP4 weights: two values per byte
        n0 = bx * self.logic.cfg.bn
        smem = cutlass.memory.SmemAllocator()
        tiles = smem.allocate_tensor(cutlass.Uint8, cute.make_layout(self.logic.smem_bytes), 128)
        sbase = tiles.iterator.toint()
        total = mStart[num_e]
        w0 = by * self.logic.cfg.bm
        if w0 < total:  # uniform per CTA: windows past the routed rows exit at once
            w1 = X.DEVICE.imin(w0 + self.logic.cfg.bm, total)
            e_first = mSorted[w0]
            e_last = mSorted[w1 - 1]
            for e in cutlass.range(e_first, e_last + 1, unroll=1):
                lo = X.DEVICE.imax(mStart[e], w0)
                hi = X.DEVICE.imin(mStart[e + 1], w1)
                if lo < hi:
                    rt = KT.Runtime(
                        mA.iterator.toint(),
                        mSFA.iterator.toint(),
                        mB.iterator.toint() + Int64(e) * Int64(mB.shape[1]) * Int64(mB.shape[2]),
                        mSFB.iterator.toint() + Int64(e) * Int64(mSFB.shape[1]),
                        mC.iterator.toint(),
                        mWAlpha.iterator.toint() + Int64(e) * 4,
                        mAAlpha.iterator.toint() + Int64(e) * 4,
                        mAct.iterator.toint(),
                        hi,
                        mC.shape[1],
                        k,
                        Float32(1.0),
                    )
                    self.inner.tile(rt, tid, lo, n0, sbase)
                    X.DEVICE.barrier()  # the next expert's first stores reuse buffer 0


class GroupedFc1(GroupedGemm):
    @cute.jit
    def __call__(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted, stream: cuda.CUstream):
        self._launch(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAct, mSorted, stream)


class GroupedFc2(GroupedGemm):
    @cute.jit
    def __call__(self, mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mSorted, stream: cuda.CUstream):
        self._launch(mA, mSFA, mB, mSFB, mC, mStart, mWAlpha, mAAlpha, mAAlpha, mSorted, stream)  # no act params


@kernel("moe.fused_moe.grouped_fc1", sources=_SOURCES)
def compile_grouped_fc1(a_fmt: str, b_fmt: str, activation: str, config: TiledConfig, arch: str):
    """tvm-ffi launcher `fn(A, SFA, B, SFB, C, expert_start, w_alpha, a_alpha, act_params,
    sorted_expert)` on torch's current stream (module docstring)."""
    logic = GroupedLogic(1, a_fmt, b_fmt, activation, config)
    act = X.make_fake_compact_tensor(cutlass.Float32, (3,), assumed_align=4)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(GroupedFc1(logic), *X.fake_args(a_fmt, "bfloat16"), act, X.fake_active(), stream, arch=arch)


@kernel("moe.fused_moe.grouped_fc2", sources=_SOURCES)
def compile_grouped_fc2(a_fmt: str, b_fmt: str, config: TiledConfig, arch: str):
    """tvm-ffi launcher `fn(A2, SFA2, B2, SFB2, C2, expert_start, w_alpha, a_alpha, sorted_expert)`."""
    logic = GroupedLogic(2, a_fmt, b_fmt, None, config)
    stream = make_fake_stream(use_tvm_ffi_env_stream=True)
    return cute_compile(GroupedFc2(logic), *X.fake_args(a_fmt, "float32"), X.fake_active(), stream, arch=arch)
